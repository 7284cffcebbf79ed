package tokenize

import "unsafe"

// unsafeBytes returns the bytes of s without copying. Callers must not
// modify them.
func unsafeBytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// offsetIn returns the offset of sub within whole; sub must be a subslice.
func offsetIn(whole, sub []byte) int {
	if len(sub) == 0 {
		return 0
	}
	return int(uintptr(unsafe.Pointer(unsafe.SliceData(sub))) - uintptr(unsafe.Pointer(unsafe.SliceData(whole))))
}

// unsafeString returns b as a string without copying. Callers must not
// modify b while the string is in use.
func unsafeString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
