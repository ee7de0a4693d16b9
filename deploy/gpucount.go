package deploy

import "fmt"

// takeGPUCount resolves a cluster file's or a setting's hardware to its
// preset's name, and lets it name its GPUs as a run records them
// ("4xH200", "8 x A100-40GB": the preset and how many GPUs a server
// has), as ingest --hardware does: the preset becomes the hardware, and
// the count is the server's TP where the file and the settings give no
// parallel size (the record's, if any, is then noted as overridden),
// else it must be what they multiply to (TP·PP, and ·DP where DP ranks
// are GPUs of their own rather than SGLang's DP attention inside TP).
func (c *Cluster) takeGPUCount() error {
	from, ok := c.Given("hardware")
	if !ok {
		return nil
	}
	name, n := splitGPUCount(c.Hardware)
	// The preset's own name, as a record's resolves, so that the two
	// compare equal ("H200" and a record's "8xH200" are both h200); an
	// unknown name stays for ResolveHardware's error.
	if h, err := hardwareName(name); err == nil {
		name = h
	}
	c.Hardware = name
	if n == 0 {
		return nil
	}
	_, tp := c.Given("tp")
	_, pp := c.Given("pp")
	_, dp := c.Given("dp")
	if !tp && !pp && !dp {
		c.TP = n
		c.mark("tp", from)
		return nil
	}
	gpus := max(c.TP, 1) * max(c.PP, 1)
	if !c.EnableDPAttention {
		gpus *= max(c.DP, 1)
	}
	if gpus != n {
		return c.bad("hardware", from, fmt.Sprintf("%d×%s", n, name),
			fmt.Sprintf("names %d GPUs a server, but tp %d × pp %d × dp %d are %d (give the GPU alone, or parallel sizes that multiply to %d)",
				n, max(c.TP, 1), max(c.PP, 1), max(c.DP, 1), gpus, n))
	}
	return nil
}
