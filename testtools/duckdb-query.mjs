// duckdb-query.mjs runs one SQL query with DuckDB and prints the rows as
// JSON (one array of objects). opaltrace's tests use it as an independent
// reader of the Parquet files opaltrace writes.
//
// Usage: node duckdb-query.mjs "SELECT count(*) AS n FROM 'file.parquet'"
import { DuckDBInstance } from '@duckdb/node-api';

const sql = process.argv[2];
if (!sql) {
  console.error('usage: node duckdb-query.mjs SQL');
  process.exit(2);
}
const instance = await DuckDBInstance.create(':memory:');
const conn = await instance.connect();
const reader = await conn.runAndReadAll(sql);
const rows = reader.getRowObjectsJson();
process.stdout.write(JSON.stringify(rows) + '\n');
