//go:build !unix

package kafka

import "errors"

// diskSpace is not known here: DescribeLogDirs answers -1.
func diskSpace(string) (total, free int64, err error) {
	return 0, 0, errors.New("disk space: not supported on this platform")
}
