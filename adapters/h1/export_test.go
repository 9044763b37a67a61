package h1

// Reading is reading, for the tests: the Conn begins a read.
func (r *Recorder) Reading() { r.reading() }
