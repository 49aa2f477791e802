//go:build !linux

package realnode

import "errors"

// unmount is never reached off Linux: Available refuses the real node there.
func unmount(string, bool) error { return errors.New("unmount needs Linux") }
