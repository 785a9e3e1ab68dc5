//go:build unix

package kafka

import "golang.org/x/sys/unix"

// diskSpace is the size and the bytes free to unprivileged users of the
// volume dir is on.
func diskSpace(dir string) (total, free int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Blocks) * int64(st.Bsize), int64(st.Bavail) * int64(st.Bsize), nil
}
