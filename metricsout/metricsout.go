package metricsout

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"

	"github.com/opaltrace/opaltrace/trace"
)

// Options say how a run's metrics are written.
type Options struct {
	Engine   string        // "vllm" or "sglang": whose metric names
	Model    string        // the model_name label
	Interval time.Duration // between samples; 0 means 15 s
	Start    time.Time     // wall time of the run's t = 0
}

// Bucket bounds (seconds) of the engines' latency histograms.
var (
	vllmTTFTBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	vllmITLBuckets  = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	vllmE2EBuckets  = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}

	sglangTTFTBuckets = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400}
	sglangITLBuckets  = []float64{0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000}
	sglangE2EBuckets  = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 800}
)

// A histogram accumulates observations per sample interval: counts[k][i]
// is the observations of interval k in bucket i (the last is +Inf), and
// sums[k] their sum.
type histogram struct {
	bounds []float64
	counts [][]uint64
	sums   []float64
}

func (h *histogram) observe(k int, v float64) {
	for len(h.counts) <= k {
		h.counts = append(h.counts, make([]uint64, len(h.bounds)+1))
		h.sums = append(h.sums, 0)
	}
	i := sort.SearchFloat64s(h.bounds, v) // the first bound ≥ v: Prometheus' le
	h.counts[k][i]++
	h.sums[k] += v
}

// A counter accumulates increments per sample interval.
type counter []float64

func (c *counter) add(k int, v float64) {
	for len(*c) <= k {
		*c = append(*c, 0)
	}
	(*c)[k] += v
}

// A Recorder folds a replay's records and per-second statistics into the
// engine's metrics. Use: New, Add each record and AddSecond each second
// (in any order), then WriteOpenMetrics.
type Recorder struct {
	o                         Options
	interval                  float64 // seconds
	ttft, itl, e2e            histogram
	prompt, generation, done  counter
	queries, hits             counter
	running, waiting, kvUsage []float64 // per second
	seconds                   []bool    // which seconds were added
}

// Start is the wall time of the run's t = 0.
func (r *Recorder) Start() time.Time { return r.o.Start }

// New returns an empty recorder.
func New(o Options) (*Recorder, error) {
	r := &Recorder{o: o, interval: o.Interval.Seconds()}
	if r.interval == 0 {
		r.interval = 15
	}
	if r.interval < 0.001 {
		return nil, fmt.Errorf("metrics interval %v: under 1 ms", o.Interval)
	}
	switch o.Engine {
	case "vllm":
		r.ttft.bounds, r.itl.bounds, r.e2e.bounds = vllmTTFTBuckets, vllmITLBuckets, vllmE2EBuckets
	case "sglang":
		r.ttft.bounds, r.itl.bounds, r.e2e.bounds = sglangTTFTBuckets, sglangITLBuckets, sglangE2EBuckets
	default:
		return nil, fmt.Errorf("metrics engine %q: want vllm or sglang", o.Engine)
	}
	return r, nil
}

// sample returns the index of the first sample whose time is at or after
// t seconds: samples are at interval, 2·interval, …, and sample k (0-based)
// holds what happened before (k+1)·interval.
func (r *Recorder) sample(t float64) int {
	return max(0, int(math.Floor(t/r.interval)))
}

// Add records one simulated request. Requests that did not complete add
// nothing: an engine observes latencies of finished requests only.
func (r *Recorder) Add(q *trace.Request) {
	if q.Status != trace.StatusOK || !q.Arrival.OK {
		return
	}
	a := q.Arrival.V.Seconds()
	if q.TTFTSec.OK {
		first := a + q.TTFTSec.V
		k := r.sample(first)
		r.ttft.observe(k, q.TTFTSec.V)
		if q.InputTokens.OK {
			r.queries.add(k, float64(q.InputTokens.V))
			h := q.CachedTokens.Or(0)
			if q.DeviceHitTokens.OK || q.HostHitTokens.OK || q.StorageHitTokens.OK || q.RemoteHitTokens.OK {
				h = q.DeviceHitTokens.V + q.HostHitTokens.V + q.StorageHitTokens.V + q.RemoteHitTokens.V
			}
			r.hits.add(k, float64(h))
		}
		t := first
		for _, g := range q.ITLSec {
			t += g
			r.itl.observe(r.sample(t), g)
		}
	}
	if q.E2ESec.OK {
		k := r.sample(a + q.E2ESec.V)
		r.e2e.observe(k, q.E2ESec.V)
		r.prompt.add(k, float64(q.InputTokens.V))
		r.generation.add(k, float64(q.OutputTokens.V))
		r.done.add(k, 1)
	}
}

// AddSecond records one second of the replay's per-second statistics of
// a run whose KV capacity is kvBlocks blocks over all workers (0:
// unknown, no KV usage gauge).
func (r *Recorder) AddSecond(s trace.Second, kvBlocks int64) {
	i := int(s.Second)
	if i < 0 {
		return
	}
	for len(r.running) <= i {
		r.running = append(r.running, 0)
		r.waiting = append(r.waiting, 0)
		r.kvUsage = append(r.kvUsage, math.NaN())
		r.seconds = append(r.seconds, false)
	}
	r.running[i], r.waiting[i], r.seconds[i] = s.Running, s.Waiting, true
	if kvBlocks > 0 {
		r.kvUsage[i] = s.KVBlocksUsed / float64(kvBlocks)
	}
}

// samples is the number of samples written: enough to cover every
// observation and second.
func (r *Recorder) samples() int {
	n := max(len(r.ttft.counts), len(r.itl.counts), len(r.e2e.counts), len(r.prompt), len(r.queries))
	if len(r.seconds) > 0 {
		n = max(n, int(math.Ceil(float64(len(r.seconds))/r.interval)))
	}
	return n
}

// Families returns the metric families, each holding one metric per
// sample with its timestamp, in the engine's names.
func (r *Recorder) Families() []*dto.MetricFamily {
	n := r.samples()
	ts := func(k int) *int64 {
		return proto.Int64(r.o.Start.Add(time.Duration(float64(k+1) * r.interval * float64(time.Second))).UnixMilli())
	}
	labels := []*dto.LabelPair{{Name: proto.String("model_name"), Value: proto.String(r.o.Model)}}
	if r.o.Engine == "vllm" {
		labels = append(labels, &dto.LabelPair{Name: proto.String("engine"), Value: proto.String("0")})
	}
	hist := func(name, help string, h *histogram) *dto.MetricFamily {
		mf := &dto.MetricFamily{Name: proto.String(name), Help: proto.String(help), Type: dto.MetricType_HISTOGRAM.Enum()}
		cum := make([]uint64, len(h.bounds)+1)
		sum := 0.0
		for k := range n {
			if k < len(h.counts) {
				for i, c := range h.counts[k] {
					cum[i] += c
				}
				sum += h.sums[k]
			}
			var total uint64
			bs := make([]*dto.Bucket, len(h.bounds))
			for i, b := range h.bounds {
				total += cum[i]
				bs[i] = &dto.Bucket{UpperBound: proto.Float64(b), CumulativeCount: proto.Uint64(total)}
			}
			total += cum[len(h.bounds)]
			mf.Metric = append(mf.Metric, &dto.Metric{Label: labels, TimestampMs: ts(k),
				Histogram: &dto.Histogram{SampleCount: proto.Uint64(total), SampleSum: proto.Float64(sum), Bucket: bs}})
		}
		return mf
	}
	count := func(name, help string, c counter) *dto.MetricFamily {
		// The encoder writes a counter's family name without _total and
		// its samples with it, as OpenMetrics wants, when the name ends
		// with it.
		mf := &dto.MetricFamily{Name: proto.String(name + "_total"), Help: proto.String(help), Type: dto.MetricType_COUNTER.Enum()}
		v := 0.0
		for k := range n {
			if k < len(c) {
				v += c[k]
			}
			mf.Metric = append(mf.Metric, &dto.Metric{Label: labels, TimestampMs: ts(k), Counter: &dto.Counter{Value: proto.Float64(v)}})
		}
		return mf
	}
	// A gauge sample is the mean over the seconds of its interval that
	// the per-second file has; none when it has none.
	gauge := func(name, help string, per []float64) *dto.MetricFamily {
		mf := &dto.MetricFamily{Name: proto.String(name), Help: proto.String(help), Type: dto.MetricType_GAUGE.Enum()}
		for k := range n {
			lo, hi := int(math.Floor(float64(k)*r.interval)), int(math.Ceil(float64(k+1)*r.interval))
			sum, m := 0.0, 0
			for i := max(lo, 0); i < hi && i < len(per); i++ {
				if r.seconds[i] && !math.IsNaN(per[i]) {
					sum, m = sum+per[i], m+1
				}
			}
			if m == 0 {
				continue
			}
			mf.Metric = append(mf.Metric, &dto.Metric{Label: labels, TimestampMs: ts(k), Gauge: &dto.Gauge{Value: proto.Float64(sum / float64(m))}})
		}
		if len(mf.Metric) == 0 {
			return nil
		}
		return mf
	}
	var out []*dto.MetricFamily
	add := func(mf *dto.MetricFamily) {
		if mf != nil && len(mf.Metric) > 0 {
			out = append(out, mf)
		}
	}
	hitRate := make([]float64, 0)
	switch r.o.Engine {
	case "vllm":
		add(hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", &r.ttft))
		add(hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", &r.itl))
		add(hist("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds (the older name of the inter-token latency).", &r.itl))
		add(hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", &r.e2e))
		add(gauge("vllm:num_requests_running", "Number of requests in model execution batches.", r.running))
		add(gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", r.waiting))
		add(gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", r.kvUsage))
		add(count("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", r.queries))
		add(count("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", r.hits))
		add(count("vllm:prompt_tokens", "Number of prefill tokens processed.", r.prompt))
		add(count("vllm:generation_tokens", "Number of generation tokens processed.", r.generation))
		add(count("vllm:request_success", "Count of successfully processed requests.", r.done))
	case "sglang":
		add(hist("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", &r.ttft))
		add(hist("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", &r.itl))
		add(hist("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", &r.e2e))
		add(gauge("sglang:num_running_reqs", "The number of running requests.", r.running))
		add(gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", r.waiting))
		add(gauge("sglang:token_usage", "The token usage.", r.kvUsage))
		// The cache hit rate of the prompts that reached their first
		// token in the interval.
		for k := range r.queries {
			v := math.NaN()
			if r.queries[k] > 0 {
				v = r.hits[k] / r.queries[k]
			}
			hitRate = append(hitRate, v)
		}
		add(r.rateGauge("sglang:cache_hit_rate", "The prefix cache hit rate.", hitRate, labels, ts))
		add(count("sglang:prompt_tokens", "Number of prefill tokens processed.", r.prompt))
		add(count("sglang:generation_tokens", "Number of generation tokens processed.", r.generation))
		add(count("sglang:cached_tokens", "Number of cached prompt tokens.", r.hits))
		add(count("sglang:num_requests", "Number of requests processed.", r.done))
	}
	return out
}

// rateGauge is a gauge with one value per sample interval (NaN: none).
func (r *Recorder) rateGauge(name, help string, v []float64, labels []*dto.LabelPair, ts func(int) *int64) *dto.MetricFamily {
	mf := &dto.MetricFamily{Name: proto.String(name), Help: proto.String(help), Type: dto.MetricType_GAUGE.Enum()}
	for k, x := range v {
		if !math.IsNaN(x) {
			mf.Metric = append(mf.Metric, &dto.Metric{Label: labels, TimestampMs: ts(k), Gauge: &dto.Gauge{Value: proto.Float64(x)}})
		}
	}
	if len(mf.Metric) == 0 {
		return nil
	}
	return mf
}

// WriteOpenMetrics writes the families as OpenMetrics text, ending with
// "# EOF".
func (r *Recorder) WriteOpenMetrics(w io.Writer) error {
	fams := r.Families()
	if len(fams) == 0 {
		return errors.New("metrics: no completed request and no second to write")
	}
	for _, mf := range fams {
		if _, err := expfmt.MetricFamilyToOpenMetrics(w, mf); err != nil {
			return err
		}
	}
	_, err := expfmt.FinalizeOpenMetrics(w)
	return err
}
