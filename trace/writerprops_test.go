package trace

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// The writer's properties describe its pages, and each way they could stop
// doing so (a default changed by an arrow-go upgrade, an option added to
// writerProperties) is refused by checkWriterProperties, which newEncoder
// calls before writing a byte.
func TestWriterPropertiesMatchPages(t *testing.T) {
	sc, err := pqarrow.ToParquet(Schema(), writerProperties(), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := checkWriterProperties(writerProperties(), sc); err != nil {
		t.Fatalf("the writer's own properties: %v", err)
	}
	base := func(extra ...parquet.WriterProperty) *parquet.WriterProperties {
		opts := []parquet.WriterProperty{
			parquet.WithCompression(compress.Codecs.Zstd),
			parquet.WithDictionaryDefault(false),
			parquet.WithDictionaryFor("run", true),
		}
		return parquet.NewWriterProperties(append(opts, extra...)...)
	}
	if err := checkWriterProperties(base(), sc); err != nil {
		t.Fatalf("a minimal matching set: %v", err)
	}
	for _, tc := range []struct {
		name string
		prop parquet.WriterProperty
		want string
	}{
		{"v2 data pages", parquet.WithDataPageVersion(parquet.DataPageV2), "version 1 pages"},
		{"format 1.0 dictionaries", parquet.WithVersion(parquet.V1_0), "RLE_DICTIONARY"},
		{"another codec", parquet.WithCompressionFor("ttft_s", compress.Codecs.Snappy), "the pages are zstd"},
		{"delta encoding", parquet.WithEncodingFor("input_tokens", parquet.Encodings.DeltaBinaryPacked), "the pages are PLAIN"},
		{"dictionary of numbers", parquet.WithDictionaryFor("e2e_s", true), "strings only"},
		{"dictionary size", parquet.WithDictionaryPageSizeLimit(dictPageLimit / 2), "limit dictionary pages"},
		{"page index", parquet.WithPageIndexEnabledFor("run", true), "page index"},
		{"bloom filter", parquet.WithBloomFilterEnabledFor("request_id", true), "bloom filter"},
	} {
		err := checkWriterProperties(base(tc.prop), sc)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}
