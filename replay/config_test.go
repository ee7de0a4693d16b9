package replay

import (
	"os"
	"strings"
	"testing"
)

func TestLoadConfig(t *testing.T) {
	c, err := LoadConfig("testdata/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := c.Scheduler
	if c.Workers != 16 || c.Router != RouterRoundRobin || c.Seed != 7 ||
		s.MaxNumBatchedTokens != 4096 || *s.EnablePrefixCaching ||
		s.MaxNumSeqs != 256 || s.BlockSize != 16 || s.KVCacheTokens != 0 ||
		c.Workload.Mode != ModeOpen || c.Workload.TimeScale != 0.5 || c.Workload.Clients != 1 {
		t.Errorf("config %+v scheduler %+v", c, s)
	}
}

func TestParseConfigDefaults(t *testing.T) {
	c, err := ParseConfig("empty.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	d := DefaultConfig()
	if c.Workers != d.Workers || c.Scheduler.MaxNumBatchedTokens != 8192 || !*c.Scheduler.EnablePrefixCaching ||
		c.Workload.Mode != ModeOpen || c.Workload.TimeScale != 1 {
		t.Errorf("defaults %+v", c)
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"workers: 2\nrouter: fastest\n", "c.yaml:2: router: unknown router \"fastest\""},
		{"scheduler:\n  block_size: -16\n", "c.yaml:2: scheduler.block_size: negative (-16)"},
		{"workload:\n  mode: open\n  time_scale: -1\n", "c.yaml:3: workload.time_scale: -1 is not a non-negative number"},
		{"workload:\n  mode: burst\n", "c.yaml:2: workload.mode: unknown mode"},
		{"schedular:\n  block_size: 16\n", "c.yaml: yaml: unmarshal errors:\n  line 1: field schedular not found"},
		{"workers: [1\n", "c.yaml: yaml: line 1"},
	} {
		_, err := ParseConfig("c.yaml", []byte(c.in))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want prefix %q", c.in, err, c.want)
		}
	}
}

// FuzzParseConfig: no input panics, and whatever parses is valid and has
// every default filled.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"", "workers: 4\n", "scheduler:\n  max_num_seqs: 8\n  enable_prefix_caching: false\n",
		"workload:\n  mode: closed\n  clients: 64\n", "router: random\nseed: 9\n",
	} {
		f.Add([]byte(s))
	}
	if data, err := os.ReadFile("testdata/cluster.yaml"); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig("fuzz.yaml", data)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("parsed config invalid: %v", err)
		}
		if c.Workers <= 0 || c.Scheduler.BlockSize <= 0 || c.Scheduler.MaxNumBatchedTokens <= 0 ||
			c.Scheduler.MaxNumSeqs <= 0 || c.Scheduler.EnablePrefixCaching == nil || c.Workload.TimeScale <= 0 {
			t.Fatalf("defaults not filled: %+v", c)
		}
	})
}
