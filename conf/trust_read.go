package conf

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// OpenFile opens path to read without blocking on the open: a FIFO or a
// device node put where a file is expected never holds toolgate (opening
// a FIFO to read waits for a writer); each caller refuses what is not a
// regular file by its fstat. flags are added (e.g. syscall.O_NOFOLLOW).
func OpenFile(path string, flags int) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|flags, 0)
}

// ReadTrusted reads the file at path under the rules tools.conf is read
// by: a regular file, writable by no one but its owner, owned (with every
// directory on its way from /, through every symlink) by root or
// toolgate's own user, and the file opened the one that was checked. what
// names the file in the refusal ("policy file"). A file over max bytes is
// refused. A refusal is an *Error (Field "file").
func ReadTrusted(path, what string, max int64) ([]byte, error) {
	f, err := OpenFile(path, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	refuse := func(err error) error { return &Error{File: path, Field: "file", Err: err} }
	if !fi.Mode().IsRegular() {
		return nil, refuse(fmt.Errorf("not a regular file (mode %s)", fi.Mode()))
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return nil, refuse(fmt.Errorf("group- or world-writable (mode %04o): anyone who can write the %s decides what toolgate runs; chmod go-w %s", perm, what, path))
	}
	checked, err := checkTrusted(path, os.Geteuid())
	if err == nil {
		err = checkSame(path, fi, checked)
	}
	if err != nil {
		return nil, refuse(err)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if int64(len(data)) > max {
		return nil, refuse(fmt.Errorf("over %d bytes", max))
	}
	return data, nil
}
