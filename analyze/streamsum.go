package analyze

// A pairwiseStream computes numpy's pairwise sum of n values fed one at a
// time, in O(log n) memory, with the same result to the last bit as
// pairwiseSum over the whole slice.
//
// Note: numpy's pairwise summation splits a block of n > 128 values at
// n/2 rounded down to a multiple of 8, recursively; the tree depends only
// on n. Knowing n in advance (from a counting pass) we walk that tree left
// to right: frames hold the path from the root to the current leaf (≤ 128
// values, summed by pairwiseSum), and a finished subtree's sum is added to
// its left sibling's exactly where the recursion would add it.
type pairwiseStream struct {
	frames []pairFrame
	leaf   []float64
	leafN  int
	sum    float64
	done   bool
}

type pairFrame struct {
	n       int     // values under this node
	left    float64 // the left half's sum, once known
	inRight bool
}

// newPairwiseStream prepares the sum of exactly n values.
func newPairwiseStream(n int) *pairwiseStream {
	s := &pairwiseStream{leaf: make([]float64, 0, 128)}
	if n == 0 {
		s.done = true
		return s
	}
	s.descend(n)
	return s
}

// descend pushes frames from a node of n values down its leftmost path.
func (s *pairwiseStream) descend(n int) {
	for n > 128 {
		s.frames = append(s.frames, pairFrame{n: n})
		n = pairSplit(n)
	}
	s.leafN = n
	s.leaf = s.leaf[:0]
}

// pairSplit is the size of the left half of a node of n > 128 values.
func pairSplit(n int) int {
	n2 := n / 2
	return n2 - n2%8
}

// Add feeds the next value. Feeding more than n values panics.
func (s *pairwiseStream) Add(v float64) {
	if s.done {
		panic("analyze: pairwiseStream: more values than announced")
	}
	s.leaf = append(s.leaf, v)
	if len(s.leaf) == s.leafN {
		s.closeLeaf()
	}
}

// AddSlice feeds the next values, as Add does one by one.
func (s *pairwiseStream) AddSlice(vs []float64) {
	for len(vs) > 0 {
		if s.done {
			panic("analyze: pairwiseStream: more values than announced")
		}
		if len(s.leaf) == 0 && len(vs) >= s.leafN {
			// A whole leaf in vs is summed where it is, not copied.
			n := s.leafN
			s.closeSum(pairwiseSum(vs[:n]))
			vs = vs[n:]
			continue
		}
		k := min(len(vs), s.leafN-len(s.leaf))
		s.leaf = append(s.leaf, vs[:k]...)
		vs = vs[k:]
		if len(s.leaf) == s.leafN {
			s.closeLeaf()
		}
	}
}

// closeLeaf sums the full leaf into the tree and moves to the next leaf.
func (s *pairwiseStream) closeLeaf() { s.closeSum(pairwiseSum(s.leaf)) }

// closeSum adds the sum of the current leaf into the tree and moves to the
// next leaf.
func (s *pairwiseStream) closeSum(sum float64) {
	for {
		if len(s.frames) == 0 {
			s.sum, s.done = sum, true
			return
		}
		f := &s.frames[len(s.frames)-1]
		if !f.inRight {
			f.left, f.inRight = sum, true
			s.descend(f.n - pairSplit(f.n))
			return
		}
		sum = f.left + sum
		s.frames = s.frames[:len(s.frames)-1]
	}
}

// Sum returns the sum; ok is false until all n values were fed.
func (s *pairwiseStream) Sum() (sum float64, ok bool) { return s.sum, s.done }
