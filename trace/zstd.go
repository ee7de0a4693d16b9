package trace

import (
	"sync"

	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/klauspost/compress/zstd"
)

// fastZstd is arrow-go's zstd codec with one change: at zstd's fastest
// level, which Writer uses, literals are not entropy coded.
//
// Note: arrow-go's encoders force Huffman coding of all literals
// (WithAllLitEntropyCompression). For a simulated trace, whose ITL lists
// are most of the bytes, that was a third of the compression time for a
// few percent of size (a million simulated requests: 202 MiB with it,
// 208 MiB without; matches, not literals, do the work). The frames are standard
// zstd; reading is arrow-go's own codec, unchanged. Registering replaces
// the codec for the whole process: other levels go to arrow-go's codec as
// before.
type fastZstd struct {
	compress.Codec // arrow-go's
}

var fastZstdEncoders = sync.Pool{New: func() any {
	enc, err := zstd.NewWriter(nil, zstd.WithZeroFrames(true), zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithNoEntropyCompression(true))
	if err != nil {
		panic(err) // only on invalid options
	}
	return enc
}}

func (z fastZstd) EncodeLevel(dst, src []byte, level int) []byte {
	if zstd.EncoderLevelFromZstd(level) != zstd.SpeedFastest || level == compress.DefaultCompressionLevel {
		return z.Codec.EncodeLevel(dst, src, level)
	}
	enc := fastZstdEncoders.Get().(*zstd.Encoder)
	defer fastZstdEncoders.Put(enc)
	return enc.EncodeAll(src, dst[:0])
}

func init() {
	if c, err := compress.GetCodec(compress.Codecs.Zstd); err == nil {
		compress.RegisterCodec(compress.Codecs.Zstd, fastZstd{c})
	}
}
