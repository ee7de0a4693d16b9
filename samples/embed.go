package samples

import "embed"

// FS holds every sample file, by its path under samples/.
//
//go:embed mooncake/*.jsonl models
var FS embed.FS

// MooncakeFirst10Min is the path in FS of the first 10 minutes (1,750
// requests) of the Mooncake conversation trace.
const MooncakeFirst10Min = "mooncake/conversation_trace_first10min.jsonl"

// Models is the directory in FS holding one <name>/config.json per model.
const Models = "models"
