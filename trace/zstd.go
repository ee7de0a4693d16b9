package trace

import "github.com/klauspost/compress/zstd"

// Writer compresses pages with zstd's fastest level, without entropy
// coding of literals and without frame checksums.
//
// Note: arrow-go's zstd codec forces Huffman coding of all literals
// (WithAllLitEntropyCompression). For a simulated trace, whose ITL lists
// are most of the bytes, that was a third of the compression time for a
// few percent of size (a million simulated requests: 202 MiB with it, 208
// MiB without; matches, not literals, do the work). The frame checksum is
// another 4 % of compression time; Parquet readers do not need it. The
// frames are standard zstd; arrow-go's codec reads them.
//
// A Writer keeps two encoders, one for the ITL column, which a goroutine of
// its own encodes, and one for the others (encoder.write). A sync.Pool of
// them lost its encoders at every garbage collection, and each new one
// allocates a history the size of a page (dataPageSize): 36 MB of fresh
// memory for a 4-worker replay of the Mooncake trace.
func newFastZstd() *zstd.Encoder {
	enc, err := zstd.NewWriter(nil, zstd.WithZeroFrames(true), zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(1), zstd.WithNoEntropyCompression(true), zstd.WithEncoderCRC(false))
	if err != nil {
		panic(err) // only on invalid options
	}
	return enc
}
