package client

// Unconfirmed is the number of writes c remembers because the registrar has not
// reported them persisted yet.
func Unconfirmed(c *Client) int {
	c.cache.mu.RLock()
	defer c.cache.mu.RUnlock()
	return len(c.cache.unconfirmed)
}

// Held is the number of endpoints in c's copy of the registrar's snapshot.
func Held(c *Client) int {
	c.cache.mu.RLock()
	defer c.cache.mu.RUnlock()
	return len(c.cache.base)
}
