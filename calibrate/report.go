package calibrate

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// WriteSummary writes, per fitted quantity, its terms, R², MAPE and
// residual quantiles, then the coefficients of cm and every warning.
func WriteSummary(w io.Writer, cm *CostModel) error {
	ew := &errWriter{w: w}
	for _, f := range cm.Fits {
		ew.printf("%s (%s), %d observations — %s\n", f.Quantity, f.Unit, f.N, f.Source)
		for _, t := range f.Terms {
			mark := ""
			if !t.Identified {
				mark = "  NOT IDENTIFIED"
			}
			ew.printf("  %-26s %14.6g ± %-10.3g %s%s\n", t.Name, t.Value, t.StdErr, t.Unit, mark)
		}
		ew.printf("  R² %.4f   MAPE %.2f%%   residual (pred−obs)/obs: p1 %+.2f%%  p10 %+.2f%%  p50 %+.2f%%  p90 %+.2f%%  p99 %+.2f%%\n",
			f.R2, f.MAPE, 100*f.Residual.P1, 100*f.Residual.P10, 100*f.Residual.P50, 100*f.Residual.P90, 100*f.Residual.P99)
	}
	names := make([]string, 0, len(cm.Coefficients))
	for n := range cm.Coefficients {
		names = append(names, n)
	}
	slices.Sort(names)
	ew.printf("coefficients (%s form):\n", cm.Form)
	for _, n := range names {
		c := cm.Coefficients[n]
		ew.printf("  %-28s %14.6g %s  (from %s)\n", n, c.Value, c.Unit, c.From)
	}
	for _, s := range cm.Warnings {
		ew.printf("warning: %s\n", s)
	}
	return ew.err
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

// WriteErrorTable writes a replay fit: its coefficients, then per run
// and target the observed value, the simulated ones with the default and
// the fitted coefficients and their relative errors, in-sample (train)
// or held out, then the warnings.
func WriteErrorTable(w io.Writer, cm *CostModel) error {
	ew := &errWriter{w: w}
	rf := cm.Replay
	ew.printf("replay fit: %d evaluations, objective %.4g (uncalibrated %.4g); %s\n", rf.Evaluations, rf.Objective, rf.Uncalibrated, rf.Optimiser)
	names := make([]string, 0, len(cm.Coefficients))
	for n := range cm.Coefficients {
		names = append(names, n)
	}
	slices.Sort(names)
	ew.printf("coefficients:\n")
	for _, n := range names {
		c := cm.Coefficients[n]
		ew.printf("  %-28s %14.6g %s  (%s)\n", n, c.Value, c.Unit, c.From)
	}
	ew.printf("%-8s %-44s %-12s %12s %12s %9s %12s %9s\n", "set", "run", "target", "observed ms", "uncal. ms", "error", "calib. ms", "error")
	for _, r := range rf.Rows {
		label := r.Label
		if len(label) > 44 {
			label = "…" + label[len(label)-43:]
		}
		obs := fmt.Sprintf("%.2f", r.Observed*1000)
		if r.Reported {
			obs += "*"
		}
		ew.printf("%-8s %-44s %-12s %12s %12.2f %+8.1f%% %12.2f %+8.1f%%\n", r.Set, label, r.Target, obs,
			r.Uncalibrated*1000, 100*r.UncalErr, r.Calibrated*1000, 100*r.CalErr)
	}
	ew.printf("(* reported by the source's summary)\n")
	if rf.Saturation != nil {
		ew.printf("%s\n", rf.Saturation.Line())
	}
	for _, s := range cm.Warnings {
		ew.printf("warning: %s\n", s)
	}
	return ew.err
}

// WriteErrorMarkdown writes a replay fit's error table as Markdown rows
// (the README's fidelity table): per run and target, in-sample or held
// out, the observed value, and the simulated one and its relative error
// with the default and with the fitted coefficients. A value the source
// reported in its summary (no per-request data) is marked *.
func WriteErrorMarkdown(w io.Writer, cm *CostModel) error {
	ew := &errWriter{w: w}
	rf := cm.Replay
	ew.printf("| run | set | target | observed ms | uncalibrated ms | error | calibrated ms | error |\n")
	ew.printf("|---|---|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rf.Rows {
		set := "in-sample"
		if r.Set == "holdout" {
			set = "**held out**"
		}
		obs := fmt.Sprintf("%.1f", r.Observed*1000)
		if r.Reported {
			obs += "*"
		}
		ew.printf("| %s | %s | %s | %s | %.1f | %+.1f %% | %.1f | %+.1f %% |\n", shortLabel(r.Label), set, r.Target, obs,
			r.Uncalibrated*1000, 100*r.UncalErr, r.Calibrated*1000, 100*r.CalErr)
	}
	if rf.Saturation != nil {
		ew.printf("\n%s\n", rf.Saturation.line("**Saturation**"))
	}
	names := make([]string, 0, len(cm.Coefficients))
	for n := range cm.Coefficients {
		names = append(names, n)
	}
	slices.Sort(names)
	if rf.StartFrom != "" {
		ew.printf("\nFitted (%d replays of the training runs, objective %.4g from %.4g at %s's coefficients, where it started):", rf.Evaluations, rf.Objective, rf.Uncalibrated, rf.StartFrom)
	} else {
		ew.printf("\nFitted (%d replays of the training runs, objective %.4g from %.4g uncalibrated):", rf.Evaluations, rf.Objective, rf.Uncalibrated)
	}
	for i, n := range names {
		sep := ","
		if i == 0 {
			sep = ""
		}
		ew.printf("%s %s %.4g (%s)", sep, n, cm.Coefficients[n].Value, cm.Coefficients[n].From)
	}
	ew.printf(".\n")
	for _, s := range cm.Warnings {
		ew.printf("\n- warning: %s", s)
	}
	ew.printf("\n")
	return ew.err
}

// shortLabel drops the file= term of a run's label: a table's heading
// names the files, and the other fields tell the runs apart.
func shortLabel(label string) string {
	var kept []string
	for _, f := range strings.Fields(label) {
		if !strings.HasPrefix(f, "file=") {
			kept = append(kept, f)
		}
	}
	return strings.Join(kept, " ")
}
