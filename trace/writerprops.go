package trace

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/schema"
)

// writerProperties are the arrow-go writer properties of opaltrace's
// files. Writer does not write through arrow-go's column writers (see
// pqpage.go): the properties name, in the footer arrow-go builds, what its
// own pages hold, and are what an arrow-go writer (pqarrow) would write
// the same records with, which the tests do.
func writerProperties() *parquet.WriterProperties {
	opts := []parquet.WriterProperty{
		// The codec the footer names; pages are compressed by
		// newFastZstd's encoders at zstd's fastest level: a tenth faster than its
		// default for the same size on simulated traces, whose ITL lists
		// are most of the bytes and repeat so much that level 1 finds it
		// all.
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithCompressionLevel(1),
		parquet.WithCreatedBy(CreatedBy),
		parquet.WithStats(true),
		// The footer lists these encodings (chunk.encodingStats counts
		// the pages): dictionaries for the few distinct strings (run,
		// status, model, semantics) but not for numbers.
		parquet.WithDictionaryDefault(false),
	}
	for _, c := range columns {
		switch {
		case c.field.Type.ID() == arrow.STRING && c.field.Name != "request_id": // ids are unique
			opts = append(opts, parquet.WithDictionaryFor(c.field.Name, true))
		case c.list:
			// A list holds up to one value per output token: the
			// bulk of a simulated file; min/max statistics of list
			// elements prune nothing.
			opts = append(opts, parquet.WithStatsFor(c.field.Name+".list.element", false))
		}
	}
	return parquet.NewWriterProperties(opts...)
}

// checkWriterProperties returns an error when props describe pages other
// than those pqchunk.go and pqpage.go write for the columns of sc: zstd
// frames, version 1 data pages, PLAIN values, RLE_DICTIONARY indices after
// a PLAIN dictionary page for dictionary strings (of at most
// dictPageLimit bytes), no page index, bloom filter or encryption. The
// footer is built from props, so a property changed in writerProperties
// (or a default changed by an arrow-go upgrade) without the pages
// following would make files that readers misread; newEncoder refuses to
// write them.
func checkWriterProperties(props *parquet.WriterProperties, sc *schema.Schema) error {
	if v := props.DataPageVersion(); v != parquet.DataPageV1 {
		return fmt.Errorf("trace: writer properties ask for data pages of version %v; the writer writes version 1 pages", v)
	}
	if props.FileEncryptionProperties() != nil {
		return fmt.Errorf("trace: writer properties ask for encryption; the writer writes plain pages")
	}
	if n := props.DictionaryPageSizeLimit(); n != dictPageLimit {
		return fmt.Errorf("trace: writer properties limit dictionary pages to %d bytes; the writer to %d", n, dictPageLimit)
	}
	for i := range sc.NumColumns() {
		d := sc.Column(i)
		path := d.Path()
		if c := props.CompressionFor(path); c != compress.Codecs.Zstd {
			return fmt.Errorf("trace: column %s: writer properties name the codec %v; the pages are zstd", path, c)
		}
		if e := props.EncodingFor(path); e != parquet.Encodings.Plain {
			return fmt.Errorf("trace: column %s: writer properties name the encoding %v; the pages are PLAIN", path, e)
		}
		if props.DictionaryEnabledFor(path) {
			if d.PhysicalType() != parquet.Types.ByteArray {
				return fmt.Errorf("trace: column %s: writer properties enable a dictionary for %v values; the writer has dictionaries for strings only", path, d.PhysicalType())
			}
			if e := props.DictionaryIndexEncoding(); e != parquet.Encodings.RLEDict {
				return fmt.Errorf("trace: column %s: writer properties encode dictionary indices as %v; the pages as RLE_DICTIONARY", path, e)
			}
			if e := props.DictionaryPageEncoding(); e != parquet.Encodings.Plain {
				return fmt.Errorf("trace: column %s: writer properties encode the dictionary page as %v; the writer as PLAIN", path, e)
			}
		}
		if props.PageIndexEnabledFor(path) {
			return fmt.Errorf("trace: column %s: writer properties ask for a page index; the writer writes none", path)
		}
		if props.BloomFilterEnabledFor(path) {
			return fmt.Errorf("trace: column %s: writer properties ask for a bloom filter; the writer writes none", path)
		}
	}
	return nil
}
