package ingest

import "testing"

// Fuzz targets of the client and production formats: fuzzFormat checks
// no panic, Validate on every accepted request, and a Parquet round trip.

func FuzzAIPerf(f *testing.F) {
	seed(f, "aiperf", aiperfFile, aiperfAggregateFile)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzFormat(t, aiperfName, data) })
}

func FuzzGenAIPerf(f *testing.F) {
	seed(f, "genaiperf")
	f.Fuzz(func(t *testing.T, data []byte) { fuzzFormat(t, genAIPerfName, data) })
}

func FuzzGuideLLM(f *testing.F) {
	seed(f, "guidellm", guideLLMFile)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzFormat(t, guideLLMName, data) })
}

func FuzzLLMPerf(f *testing.F) {
	seed(f, "llmperf", llmperfFile, llmperfSummaryFile)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzFormat(t, llmperfName, data) })
}

func FuzzInferencePerf(f *testing.F) {
	seed(f, "inferenceperf", ipStageFile)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzFormat(t, inferencePerfName, data) })
}

func FuzzAzure(f *testing.F) {
	seed(f, "azure", azureCodeFile)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzFormat(t, azureName, data) })
}

func FuzzBurstGPT(f *testing.F) {
	seed(f, "burstgpt")
	f.Fuzz(func(t *testing.T, data []byte) { fuzzFormat(t, burstGPTName, data) })
}

func FuzzLMBenchmark(f *testing.F) {
	seed(f, "lmbenchmark", lmbenchVLLMDir+"/LMBench_sharegpt_output_1.34.csv")
	f.Fuzz(func(t *testing.T, data []byte) { fuzzFormat(t, lmbenchmarkName, data) })
}

func FuzzAgentic(f *testing.F) {
	seed(f, "agentic", wekaDir+"/trace_0022.json")
	f.Fuzz(func(t *testing.T, data []byte) { fuzzFormat(t, agenticName, data) })
}

func FuzzOpal(f *testing.F) {
	seed(f, "opal", opalOneLong, opalStage0)
	f.Fuzz(func(t *testing.T, data []byte) { fuzzFormat(t, opalName, data) })
}
