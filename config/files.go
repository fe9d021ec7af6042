package config

import "slices"

// Files returns the absolute path of every configuration file the load
// read, in the order it read them: the main file, then the home file
// (client). A file that does not exist and was not required is not
// listed. The reload watcher watches these. A nil *Sources has none.
func (s *Sources) Files() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.files)
}
