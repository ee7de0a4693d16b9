// hyparquet-read.mjs prints a Parquet file's created_by and rows as JSON,
// read by hyparquet (a JavaScript Parquet reader, with hyparquet-compressors
// for zstd). opaltrace's tests use it as a second independent reader of the
// files opaltrace writes, beside DuckDB.
//
// JSON has no int64, NaN, infinities, −0 or undefined: int64 values are
// printed as decimal strings, those doubles as "NaN", "Infinity",
// "-Infinity" and "-0", and undefined (hyparquet's null list) as null.
//
// Usage: node hyparquet-read.mjs FILE.parquet
import { asyncBufferFromFile, parquetMetadataAsync, parquetReadObjects } from 'hyparquet';
import { compressors } from 'hyparquet-compressors';

const path = process.argv[2];
if (!path) {
  console.error('usage: node hyparquet-read.mjs FILE.parquet');
  process.exit(2);
}
const file = await asyncBufferFromFile(path);
const metadata = await parquetMetadataAsync(file);
const rows = await parquetReadObjects({ file, metadata, compressors });
const json = JSON.stringify({ created_by: metadata.created_by, rows }, (key, v) => {
  if (v === undefined) return null;
  if (typeof v === 'bigint') return v.toString();
  if (typeof v === 'number') {
    if (Number.isNaN(v)) return 'NaN';
    if (v === Infinity) return 'Infinity';
    if (v === -Infinity) return '-Infinity';
    if (Object.is(v, -0)) return '-0';
  }
  return v;
});
process.stdout.write(json + '\n');
