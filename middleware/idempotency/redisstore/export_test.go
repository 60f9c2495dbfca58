package redisstore

// PipelineWaits reports how many scripts went through s's pipelines and
// how many WAITs covered them.
func PipelineWaits(s *Store) (scripts, waits int64) {
	return s.pipe.scripts.Load(), s.pipe.waits.Load()
}
