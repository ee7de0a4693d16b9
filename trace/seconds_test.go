package trace

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The per-second file holds every run, row and column, with its
// metadata, is the same bytes when written twice, and reads back.
func TestWriteReadSeconds(t *testing.T) {
	runs := []SecondsRun{
		{Run: "a", KVBlocks: 4096, Seconds: []Second{
			{Second: 0, Arrivals: 3, Steps: 10, Tokens: 512, Running: 2.5, Waiting: 0.5, KVBlocksUsed: 100.25, Busy: 0.75},
			{Second: 1, Completions: 3, TimedOut: 1, Rejected: 2, Preemptions: 1, Steps: 4, Tokens: 4, Running: 1, KVBlocksUsed: 2048, Busy: 0.1,
				HostKVBytes: 1 << 30, DiskKVBytes: 2 << 30, RemoteKVBytes: 3 << 30, OffloadBytes: 4096, LoadBytes: 8192, PrefetchBytes: 512,
				PCIeH2DUtil: 0.25, PCIeD2HUtil: 0.125, HostMemUtil: 0.01, NVMeUtil: 0.5, NICUtil: 0.75, ReadyWorkers: 3.5, HeldAtGateway: 1.25,
				PrefillReadyWorkers: 1.5, DecodeReadyWorkers: 2},
		}, HostKVCapacity: 2 << 30, DiskKVCapacity: 4 << 30, RemoteKVCapacity: 8 << 30},
		{Run: "b", Seconds: []Second{{Second: 0, Arrivals: 1}}},
	}
	meta := [][2]string{{MetaReplayConfig, "workers: 2\n"}, {MetaCostModel, "linear"}}
	var a, b bytes.Buffer
	if err := WriteSeconds(&a, runs, meta); err != nil {
		t.Fatal(err)
	}
	if err := WriteSeconds(&b, runs, meta); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two writes differ")
	}
	path := filepath.Join(t.TempDir(), "sec.parquet")
	if err := os.WriteFile(path, a.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	got, gotMeta, err := ReadSeconds(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, runs) {
		t.Errorf("read back\n%+v\nwant\n%+v", got, runs)
	}
	if gotMeta[MetaReplayConfig] != "workers: 2\n" || gotMeta[MetaCostModel] != "linear" || gotMeta[MetaSecondsVersion] != SecondsVersion {
		t.Errorf("metadata %v", gotMeta)
	}
	if u := got[0].KVUsage(got[0].Seconds[1]); u != 0.5 {
		t.Errorf("KV usage %v, want 0.5", u)
	}
	// A requests' file is not a per-second file.
	if _, _, err := ReadSeconds(writeSmallRequests(t)); err == nil {
		t.Error("a requests' file read as a per-second file")
	}
}

// A version 2 file (before the KV tiers' columns) reads with its tier
// figures 0.
func TestReadSecondsVersion2(t *testing.T) {
	runs := []SecondsRun{{Run: "a", KVBlocks: 64, HostKVCapacity: 1 << 30, Seconds: []Second{{Second: 0, Arrivals: 2, HostKVBytes: 1 << 20, NICUtil: 0.5}}}}
	var b bytes.Buffer
	if err := writeSeconds(&b, runs, nil, 2); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "v2.parquet")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	got, meta, err := ReadSeconds(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []SecondsRun{{Run: "a", KVBlocks: 64, Seconds: []Second{{Second: 0, Arrivals: 2}}}}
	if meta[MetaSecondsVersion] != "2" || !reflect.DeepEqual(got, want) {
		t.Errorf("version %s read as %+v, want %+v", meta[MetaSecondsVersion], got, want)
	}
}

// Files of versions 4 (before gateway_held) and 5 (before the pools'
// ready workers) read with the newer columns 0.
func TestReadSecondsOlderVersions(t *testing.T) {
	for _, tc := range []struct {
		version int
		want    Second
	}{
		{4, Second{Second: 0, Arrivals: 2, ReadyWorkers: 3}},
		{5, Second{Second: 0, Arrivals: 2, ReadyWorkers: 3, HeldAtGateway: 1}},
	} {
		runs := []SecondsRun{{Run: "a", KVBlocks: 64, Seconds: []Second{{Second: 0, Arrivals: 2, ReadyWorkers: 3, HeldAtGateway: 1, PrefillReadyWorkers: 1, DecodeReadyWorkers: 2}}}}
		var b bytes.Buffer
		if err := writeSeconds(&b, runs, nil, tc.version); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "old.parquet")
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		got, meta, err := ReadSeconds(path)
		if err != nil {
			t.Fatal(err)
		}
		want := []SecondsRun{{Run: "a", KVBlocks: 64, Seconds: []Second{tc.want}}}
		if meta[MetaSecondsVersion] != fmt.Sprint(tc.version) || !reflect.DeepEqual(got, want) {
			t.Errorf("version %s read as %+v, want %+v", meta[MetaSecondsVersion], got, want)
		}
	}
}

func writeSmallRequests(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "req.parquet")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(&Request{RequestID: "x", Status: StatusOK}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return path
}
