package auth

// CanPublishSome reports whether the connection may publish to at least one
// subject the filter matches (valid, as checked by subject.ValidateFilter): a
// protocol whose destinations capture many subjects (a Kafka topic over a stream
// of "sensors.>") shows such a destination to users who may write some of it,
// and checks each message's subject with CanPublish. The answer is not cached.
func (c *Checker) CanPublishSome(filter string) bool {
	f, err := parsePattern(filter)
	if err != nil {
		return false
	}
	if f[0] == "$TERN" && len(f) > 1 && f[1] == "SYS" {
		return false
	}
	p := c.perms.Load()
	if p == nil {
		return true
	}
	for _, d := range p.pubDeny {
		if d.covers(f) {
			return false
		}
	}
	if p.pubAll {
		return true
	}
	for _, a := range p.pubAllow {
		if a.overlaps(f) {
			return true
		}
	}
	return false
}
