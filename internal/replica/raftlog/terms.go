package raftlog

// termRuns holds the term of every index from the dummy to the last as runs:
// run i covers [runs[i].index, runs[i+1].index). Terms change rarely along a
// log, so Term never reads the disk and costs a few bytes per election.
type termRuns []termRun

type termRun struct{ index, term uint64 }

// at returns the term of index i, which the caller has checked is in the log.
func (r termRuns) at(i uint64) uint64 {
	lo, hi := 0, len(r)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r[m].index <= i {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return r[lo-1].term
}

// add records that index i (the one after the last) has term.
func (r *termRuns) add(i, term uint64) {
	if n := len(*r); n > 0 && (*r)[n-1].term == term {
		return
	}
	*r = append(*r, termRun{i, term})
}

// truncateAfter forgets the terms above i.
func (r *termRuns) truncateAfter(i uint64) {
	n := len(*r)
	for n > 1 && (*r)[n-1].index > i {
		n--
	}
	*r = (*r)[:n]
}

// compact forgets the terms below i; i is the new first index of the runs.
func (r *termRuns) compact(i uint64) {
	k := 0
	for k+1 < len(*r) && (*r)[k+1].index <= i {
		k++
	}
	*r = append(termRuns(nil), (*r)[k:]...)
	(*r)[0].index = i
}
