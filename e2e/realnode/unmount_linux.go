package realnode

import "syscall"

// unmount unmounts path; detach makes a busy mount go away as soon as it is no longer used.
func unmount(path string, detach bool) error {
	flags := 0
	if detach {
		flags = syscall.MNT_DETACH
	}
	return syscall.Unmount(path, flags)
}
