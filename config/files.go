package config

import "slices"

// Files returns the configuration files the values came from, sorted: the
// main config file when any key was read from it. A nil *Sources, or one
// with no value from a file, returns nil.
func (s *Sources) Files() []string {
	if s == nil {
		return nil
	}
	var files []string
	for _, src := range s.m {
		if src.Kind == SourceFile && !slices.Contains(files, src.Name) {
			files = append(files, src.Name)
		}
	}
	slices.Sort(files)
	return files
}
