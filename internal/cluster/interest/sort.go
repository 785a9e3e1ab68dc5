package interest

import (
	"cmp"
	"slices"
)

// sortChanges orders changes made from a map, so that replays are deterministic.
func sortChanges(cs []Change) {
	slices.SortFunc(cs, func(a, b Change) int {
		if c := cmp.Compare(a.Key.Subject, b.Key.Subject); c != 0 {
			return c
		}
		return cmp.Compare(a.Key.Queue, b.Key.Queue)
	})
}
