package trace

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/schema"
	"github.com/klauspost/compress/zstd"
)

// dataPageSize is the uncompressed size at which a list's values start a
// new page (at a row boundary): larger pages compress the long ITL lists
// better. A million simulated requests: 230 MiB with 1 MiB pages, 210 MiB
// with 2, 185 MiB with 4 (writing 3 % slower), 175 MiB with 8 (15 %
// slower; BenchmarkWriteAzure).
const dataPageSize = 4 << 20

// dictPageLimit is the most bytes of distinct strings a column chunk
// dictionary-encodes (arrow-go's default); beyond, its strings are PLAIN.
const dictPageLimit = 1 << 20

// A chunk is one column chunk of a row group being encoded: its pages,
// compressed, with their headers, and the figures the footer needs.
type chunk struct {
	descr    *schema.Column
	stats    bool // min/max/null statistics for this column
	dict     bool // dictionary encoding allowed (strings)
	maxStats int  // the longest min or max kept

	buf          []byte // pages, the dictionary page first
	dictLen      int    // bytes of the dictionary page, header included; 0 without
	levels       int64  // levels in the data pages: the chunk's num_values
	uncompressed int64  // headers and uncompressed bodies
	dataPages    int32
	st           metadata.TypedStatistics

	pg *pager // makes the pages; shared with the chunks the same goroutine encodes

	// Dictionary encoding: each distinct string's index, the strings in
	// index order, and each value's index.
	index    map[string]uint32
	dictVals []parquet.ByteArray
	idx      []uint32
}

// A pager holds what making a page takes: the compressor and the scratch
// of a page's uncompressed and compressed bodies. The chunks one goroutine
// encodes share one (encoder.write: the ITL column's, the others').
//
// Note: a scratch per chunk grew, row group after row group, in each of
// some sixty columns: a page's body and its compressed copy each, up to a
// list page's 4 MiB, allocated over again at each doubling.
type pager struct {
	zenc    *zstd.Encoder // newFastZstd
	body, z []byte
	// ready, when not nil, closes when Prewarm's goroutine is done with
	// the pager (await).
	ready chan struct{}
}

func (c *chunk) reset() {
	c.pg.await()
	c.buf, c.dictLen, c.levels, c.uncompressed, c.dataPages = c.buf[:0], 0, 0, 0, 0
	c.st = nil
	if c.stats {
		c.st = metadata.NewStatistics(c.descr, nil)
	}
}

// page compresses c.pg.body and appends it as a page of type typ holding
// numValues levels (a data page) or dictionary entries.
func (c *chunk) page(typ int32, numValues int, encoding int32) {
	zenc := c.pg.zenc
	c.pg.z = zenc.EncodeAll(c.pg.body, growBytes(c.pg.z[:0], zenc.MaxEncodedSize(len(c.pg.body))))
	c.buf = growBytes(c.buf, maxPageHeader+len(c.pg.z))
	start := len(c.buf)
	c.buf = appendPageHeader(c.buf, typ, len(c.pg.body), len(c.pg.z), numValues, encoding)
	c.uncompressed += int64(len(c.buf) - start + len(c.pg.body))
	c.buf = append(c.buf, c.pg.z...)
	if typ == pageData {
		c.levels += int64(numValues)
		c.dataPages++
	} else {
		c.dictLen = len(c.buf)
	}
}

// statistics returns the chunk's encoded statistics, as arrow-go's column
// writers finish them.
func (c *chunk) statistics() (metadata.EncodedStatistics, bool, error) {
	if c.st == nil {
		return metadata.EncodedStatistics{}, false, nil
	}
	enc, err := c.st.Encode()
	if err != nil {
		return enc, false, err
	}
	enc.ApplyStatSizeLimits(c.maxStats)
	enc.Signed = schema.SortSIGNED == c.descr.SortOrder()
	return enc, enc.IsSet(), nil
}

// encodingStats counts the chunk's pages by encoding.
func (c *chunk) encodingStats() metadata.EncodingStats {
	var s metadata.EncodingStats
	if c.dictLen > 0 {
		s.DictEncodingStats = map[parquet.Encoding]int32{parquet.Encodings.Plain: 1}
		s.DataEncodingStats = map[parquet.Encoding]int32{parquet.Encodings.RLEDict: c.dataPages}
	} else {
		s.DataEncodingStats = map[parquet.Encoding]int32{parquet.Encodings.Plain: c.dataPages}
	}
	return s
}

// updateStats adds values and nulls to numeric statistics.
func updateStats[T int64 | int32 | float64](st metadata.TypedStatistics, vals []T, nulls int) {
	switch v := any(vals).(type) {
	case []int64:
		st.(*metadata.Int64Statistics).Update(v, int64(nulls))
	case []int32:
		st.(*metadata.Int32Statistics).Update(v, int64(nulls))
	case []float64:
		st.(*metadata.Float64Statistics).Update(v, int64(nulls))
	}
}

// littleEndian: numbers are copied to PLAIN's little-endian bytes as
// they lie in memory, else converted one by one.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// appendPlain appends numbers in PLAIN encoding.
func appendPlain[T int64 | int32 | float64](dst []byte, vals []T) []byte {
	if len(vals) == 0 {
		return dst
	}
	if littleEndian {
		return append(dst, unsafe.Slice((*byte)(unsafe.Pointer(&vals[0])), len(vals)*int(unsafe.Sizeof(vals[0])))...)
	}
	for _, v := range vals {
		switch x := any(v).(type) {
		case int64:
			dst = binary.LittleEndian.AppendUint64(dst, uint64(x))
		case int32:
			dst = binary.LittleEndian.AppendUint32(dst, uint32(x))
		case float64:
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(x))
		}
	}
	return dst
}

// appendPlainBytes appends byte arrays in PLAIN encoding: a 4-byte length
// before each.
func appendPlainBytes(dst []byte, vals []parquet.ByteArray) []byte {
	for _, v := range vals {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(v)))
		dst = append(dst, v...)
	}
	return dst
}

// appendDefLevels appends the definition levels of an optional scalar
// column (0: null, 1: present), with their length.
func appendDefLevels(dst []byte, def []int16) []byte {
	dst, at := beginLevels(dst)
	r := newRLE(dst, 1)
	for i := 0; i < len(def); {
		j := i + 1
		for j < len(def) && def[j] == def[i] {
			j++
		}
		r.put(uint32(def[i]), j-i)
		i = j
	}
	return endLevels(r.finish(), at)
}

// encodeOptional encodes an optional number column as one data page.
func encodeOptional[T int64 | int32 | float64](c *chunk, vals []T, def []int16) {
	if c.st != nil {
		updateStats(c.st, vals, len(def)-len(vals))
	}
	c.pg.body = appendDefLevels(c.pg.body[:0], def)
	c.pg.body = appendPlain(c.pg.body, vals)
	c.page(pageData, len(def), encPlain)
}

// encodeStrings encodes an optional string column: dictionary-encoded (a
// dictionary page, then one data page of indices) when allowed and the
// distinct strings fit dictPageLimit, else PLAIN in pages of about
// dataPageSize bytes.
func encodeStrings(c *chunk, vals []parquet.ByteArray, def []int16) {
	nulls := len(def) - len(vals)
	if !c.dict || !c.buildDict(vals) {
		if c.st != nil {
			c.st.(*metadata.ByteArrayStatistics).Update(vals, int64(nulls))
		}
		// Pages of about dataPageSize bytes: strings may be long (an
		// error message, say) and a row group has up to 64K rows.
		for row, val := 0, 0; row < len(def); {
			end, nv, size := row, 0, 0
			for end < len(def) && (end == row || size < dataPageSize) {
				if def[end] == 1 {
					size += 4 + len(vals[val+nv])
					nv++
				}
				end++
			}
			c.pg.body = appendDefLevels(c.pg.body[:0], def[row:end])
			c.pg.body = appendPlainBytes(c.pg.body, vals[val:val+nv])
			c.page(pageData, end-row, encPlain)
			row, val = end, val+nv
		}
		return
	}
	if c.st != nil {
		// The dictionary holds the same minimum and maximum.
		st := c.st.(*metadata.ByteArrayStatistics)
		st.Update(c.dictVals, int64(nulls))
		st.IncNumValues(int64(len(vals) - len(c.dictVals)))
	}
	c.pg.body = appendPlainBytes(c.pg.body[:0], c.dictVals)
	c.page(pageDictionary, len(c.dictVals), encPlain)

	c.pg.body = appendDefLevels(c.pg.body[:0], def)
	width := 0 // as arrow-go: 1 for a single entry
	switch n := len(c.dictVals); {
	case n == 1:
		width = 1
	case n > 1:
		width = bitWidth(n - 1)
	}
	c.pg.body = append(c.pg.body, byte(width))
	r := newRLE(c.pg.body, width)
	for _, i := range c.idx {
		r.put(i, 1)
	}
	c.pg.body = r.finish()
	c.page(pageData, len(def), encRLEDictionary)
}

// buildDict indexes vals' distinct strings in order of first appearance;
// it reports false when they exceed dictPageLimit.
func (c *chunk) buildDict(vals []parquet.ByteArray) bool {
	if c.index == nil {
		c.index = map[string]uint32{}
	}
	clear(c.index)
	c.dictVals, c.idx = c.dictVals[:0], c.idx[:0]
	size := 0
	var last string
	lastIdx := uint32(0)
	for k, v := range vals {
		// The bytes are a Request's string's (strSink), immutable.
		s := unsafe.String(unsafe.SliceData(v), len(v))
		if k > 0 && s == last {
			c.idx = append(c.idx, lastIdx)
			continue
		}
		i, ok := c.index[s]
		if !ok {
			if size += 4 + len(v); size > dictPageLimit {
				clear(c.index)
				return false
			}
			i = uint32(len(c.dictVals))
			c.index[s] = i
			c.dictVals = append(c.dictVals, v)
		}
		last, lastIdx = s, i
		c.idx = append(c.idx, i)
	}
	return true
}

// encodeList encodes a list column (optional list, repeated group,
// optional element) from its rows' values and each row's length (−1: null),
// in pages of about dataPageSize bytes of values that start at rows.
func encodeList[T int64 | int32 | float64](c *chunk, vals listValues[T], lens []int32) {
	if c.st != nil {
		nulls := 0
		for _, n := range lens {
			if n <= 0 {
				nulls++
			}
		}
		vals.updateStats(c.st, nulls)
	}
	var zero T
	perPage := dataPageSize / int(unsafe.Sizeof(zero))
	for row, val := 0, 0; row < len(lens); {
		end, nv, levels := row, 0, 0
		for end < len(lens) {
			n := max(int(lens[end]), 0)
			if end > row && nv+n > perPage {
				break
			}
			nv += n
			levels += max(n, 1)
			end++
		}
		var at int
		c.pg.body, at = beginLevels(c.pg.body[:0])
		rep := newRLE(c.pg.body, 1)
		for _, n := range lens[row:end] {
			rep.put(0, 1)
			rep.put(1, int(n)-1)
		}
		c.pg.body = endLevels(rep.finish(), at)
		c.pg.body, at = beginLevels(c.pg.body)
		def := newRLE(c.pg.body, 2)
		for _, n := range lens[row:end] {
			switch {
			case n < 0:
				def.put(0, 1)
			case n == 0:
				def.put(1, 1)
			default:
				def.put(3, int(n))
			}
		}
		c.pg.body = endLevels(def.finish(), at)
		c.pg.body = vals.appendRows(c.pg.body, row, end, val, nv)
		c.page(pageData, levels, encPlain)
		row, val = end, val+nv
	}
}
