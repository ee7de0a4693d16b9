package ingest

import (
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opaltrace/opaltrace/internal/shareddata"
)

func TestZZHang(t *testing.T) {
	var seeds [][]byte
	for _, rel := range []string{lambdaFile, er0080File} {
		b, _ := os.ReadFile(filepath.Join(shareddata.Root(), rel))
		if len(b) > 16<<10 {
			b = b[:16<<10]
		}
		seeds = append(seeds, b)
	}
	rng := rand.New(rand.NewSource(1))
	for it := 0; it < 3000; it++ {
		s := append([]byte(nil), seeds[rng.Intn(len(seeds))]...)
		for k := rng.Intn(4); k >= 0; k-- {
			i := rng.Intn(len(s))
			switch rng.Intn(3) {
			case 0:
				s[i] = "[]{},:\"0123456789.eE-NaInfity \n\\"[rng.Intn(32)]
			case 1:
				s = append(s[:i], s[i+1:]...)
			case 2:
				j := rng.Intn(len(s))
				if j > i { s = s[:i+copy(s[i:], s[j:])] }
			}
		}
		done := make(chan bool)
		go func() {
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				os.WriteFile("/tmp/hang.bin", s, 0o644)
				panic("hang")
			}
		}()
		checkRoutes(t, "x", s)
		close(done)
	}
}
