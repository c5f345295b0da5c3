package hedgeotel

import (
	"runtime/debug"
	"sync"
)

// modulePath is this module's path, as build information records it.
const modulePath = "github.com/tailcut/hedge/hedgeotel"

// version is this module's version in the running binary: the one a
// go.mod requires, or "(devel)" when it is built from a directory (a
// replace, or the module's own tests).
var version = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	mods := append([]*debug.Module{&info.Main}, info.Deps...)
	for _, m := range mods {
		if m.Path != modulePath {
			continue
		}
		if m.Replace != nil {
			m = m.Replace
		}
		if m.Version != "" {
			return m.Version
		}
	}
	return "(devel)"
})
