package trace

import (
	"encoding/binary"
	"math/bits"
)

// The pieces of a Parquet column chunk that Writer lays out itself: page
// headers (Thrift compact protocol), RLE runs (levels and dictionary
// indices) and PLAIN values. arrow-go builds the file's footer from the
// chunks' figures (metadata builders) and reads the files back.
//
// Note: Writer wrote through arrow-go's column writers until they were
// three fifths of a million-request replay's CPU time: a new writer per
// column per row group, each growing fresh page buffers by doubling and
// zeroing them on release, values copied three times before compression,
// every dictionary string hashed through an interface conversion, and
// levels encoded one by one. The layout here is the format's simplest:
// version 1 data pages, levels and dictionary indices as RLE runs only
// (a list's levels are two runs per row; a run of identical values costs
// two bytes), one page per scalar chunk.

// Parquet's enum values (parquet.thrift).
const (
	pageData       = 0 // PageType DATA_PAGE
	pageDictionary = 2 // PageType DICTIONARY_PAGE

	encPlain         = 0 // Encoding PLAIN
	encRLE           = 3 // Encoding RLE
	encRLEDictionary = 8 // Encoding RLE_DICTIONARY
)

// Thrift compact protocol field types.
const (
	thriftI32    = 5
	thriftStruct = 12
)

// appendField appends a field header: the field id as a delta from the
// previous one (always 1..15 here) and its type.
func appendField(dst []byte, delta, typ byte) []byte { return append(dst, delta<<4|typ) }

// appendI32 appends a Thrift compact i32: zigzag, then varint.
func appendI32(dst []byte, v int32) []byte {
	return binary.AppendUvarint(dst, uint64(uint32(v<<1)^uint32(v>>31)))
}

// maxPageHeader is the longest page header appendPageHeader writes: a data
// page's 8 field headers and 2 ends, and at most 5 bytes for each of its 7
// numbers (a room to reserve, not a limit: append grows past it).
const maxPageHeader = 10 + 7*5

// appendPageHeader appends the PageHeader of a page: a data page
// (DataPageHeader: num_values levels, encoding, RLE levels) or a dictionary
// page (DictionaryPageHeader: num_values entries, PLAIN).
func appendPageHeader(dst []byte, typ int32, uncompressed, compressed int, numValues int, encoding int32) []byte {
	dst = appendField(dst, 1, thriftI32)
	dst = appendI32(dst, typ)
	dst = appendField(dst, 1, thriftI32)
	dst = appendI32(dst, int32(uncompressed))
	dst = appendField(dst, 1, thriftI32)
	dst = appendI32(dst, int32(compressed))
	if typ == pageData {
		dst = appendField(dst, 2, thriftStruct) // 5: data_page_header
		dst = appendField(dst, 1, thriftI32)
		dst = appendI32(dst, int32(numValues))
		dst = appendField(dst, 1, thriftI32)
		dst = appendI32(dst, encoding)
		dst = appendField(dst, 1, thriftI32)
		dst = appendI32(dst, encRLE) // definition levels
		dst = appendField(dst, 1, thriftI32)
		dst = appendI32(dst, encRLE) // repetition levels
		dst = append(dst, 0)         // end of DataPageHeader
	} else {
		dst = appendField(dst, 4, thriftStruct) // 7: dictionary_page_header
		dst = appendField(dst, 1, thriftI32)
		dst = appendI32(dst, int32(numValues))
		dst = appendField(dst, 1, thriftI32)
		dst = appendI32(dst, encoding)
		dst = append(dst, 0) // end of DictionaryPageHeader
	}
	return append(dst, 0) // end of PageHeader
}

// An rleWriter appends a sequence of values as the RLE/bit-packed hybrid
// encoding's RLE runs, merging equal neighbours: each run is a varint
// count and the value in ⌈width/8⌉ bytes.
type rleWriter struct {
	dst   []byte
	bytes int // per value
	v     uint32
	n     int
}

func newRLE(dst []byte, width int) rleWriter { return rleWriter{dst: dst, bytes: (width + 7) / 8} }

// bitWidth is the width of values up to max.
func bitWidth(max int) int { return bits.Len32(uint32(max)) }

func (r *rleWriter) put(v uint32, n int) {
	if n <= 0 {
		return
	}
	if r.n > 0 && v == r.v {
		r.n += n
		return
	}
	r.flush()
	r.v, r.n = v, n
}

func (r *rleWriter) flush() {
	if r.n == 0 {
		return
	}
	r.dst = binary.AppendUvarint(r.dst, uint64(r.n)<<1)
	for i := 0; i < r.bytes; i++ {
		r.dst = append(r.dst, byte(r.v>>(8*i)))
	}
	r.n = 0
}

// finish flushes the last run and returns the bytes.
func (r *rleWriter) finish() []byte {
	r.flush()
	return r.dst
}

// beginLevels reserves a version 1 data page's 4-byte length of the levels
// that follow; endLevels fills it in.
func beginLevels(dst []byte) ([]byte, int) { return append(dst, 0, 0, 0, 0), len(dst) }

func endLevels(dst []byte, at int) []byte {
	binary.LittleEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
	return dst
}
