package runtime

import "os"

// SendCommand sends argv on sb's release channel as a helper session's
// command, past every check of the server's side: the tests' stand-in
// for a channel that something other than toolgate had reached.
func SendCommand(sb *Standby, argv []string, streams []*os.File) error {
	return sendCommand(sb.ctl, argv, streams)
}

// ReadStatus reads a session command's status from sb's release channel.
func ReadStatus(sb *Standby) (int, bool) { return readStatus(sb.ctl) }

// Exited is closed when sb's process has exited.
func Exited(sb *Standby) <-chan struct{} { return sb.exited }
