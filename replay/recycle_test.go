package replay

import "testing"

// alloc takes the recycled state whose table has room for the request
// (of the smallest room), else the one of the largest table, else a new
// one; and a state taken is gone from the free states.
func TestAllocByRoom(t *testing.T) {
	var e engine
	made := map[int]*reqState{}
	for _, room := range []int{0, 9, 12, 15, 100, 1000} { // 9, 12 and 15 of one class, 15 on top
		r := &reqState{blocks: make([]int32, 0, room)}
		made[room] = r
		e.putFree(r)
	}
	for _, c := range []struct {
		need int64
		room int
	}{
		{50, 100},  // 100 has room, 1000 too: the smaller
		{14, 15},   // its class's own, on top
		{13, 1000}, // its class's top (12) is too short: the next class up
		{2000, 12}, // none has room: the largest
		{5, 9},     // a class above its own
		{1, 0},     // none has room: the largest left
		{0, -1},    // none left: a new state
	} {
		r := e.alloc(c.need)
		if c.room < 0 {
			for _, m := range made {
				if r == m {
					t.Fatalf("alloc(%d) = the recycled state of room %d, want a new one", c.need, cap(r.blocks))
				}
			}
			continue
		}
		if r != made[c.room] {
			t.Fatalf("alloc(%d) = a state of room %d, want room %d", c.need, cap(r.blocks), c.room)
		}
	}
}
