// Empty: it lets procid.go declare the linknamed runtime functions without
// bodies (the compiler requires bodies in packages with no assembly).
