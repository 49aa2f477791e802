package localcluster

import (
	"bytes"
	"embed"
	"io/fs"
)

// stageFiles are kwok Stages, one per file, each documenting the rule it simulates. Giving kwokctl any
// Stage replaces all of kwok's default stages, so these are the whole simulated node and pod lifecycle
// but for the removal of a deleted pod, which local-provisioner's pod reaper does (package podreaper).
//
//go:embed stages/*.yaml
var stageFiles embed.FS

// Stages returns every kwok Stage of the local cluster as one multi-document YAML stream, in file
// name order.
func Stages() []byte {
	names, err := fs.Glob(stageFiles, "stages/*.yaml")
	if err != nil {
		panic(err) // the pattern is constant and valid
	}
	var b bytes.Buffer
	for _, name := range names {
		data, err := stageFiles.ReadFile(name)
		if err != nil {
			panic(err) // embedded files are always readable
		}
		b.WriteString("---\n# " + name + "\n")
		b.Write(data)
	}
	return b.Bytes()
}
