package client

// Unconfirmed is the number of writes c remembers because the registrar has not
// reported them persisted yet.
func Unconfirmed(c *Client) int {
	c.cache.mu.RLock()
	defer c.cache.mu.RUnlock()
	return len(c.cache.unconfirmed)
}
