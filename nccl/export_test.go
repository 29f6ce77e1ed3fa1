package nccl

// Forget drops the libraries Load and LoadRCCL cached, so a test can
// search again with another environment.
func Forget() {
	for _, v := range []*vendor{ncclVendor, rcclVendor} {
		v.mu.Lock()
		v.cached = nil
		v.mu.Unlock()
	}
}
