package client

// Unconfirmed is the number of writes c remembers because the registrar has not
// reported them persisted yet.
func Unconfirmed(c *Client) int {
	c.d.cache.mu.RLock()
	defer c.d.cache.mu.RUnlock()
	return len(c.d.cache.unconfirmed)
}

// Held is the number of endpoints in c's copy of the registrar's snapshot.
func Held(c *Client) int {
	c.d.cache.mu.RLock()
	defer c.d.cache.mu.RUnlock()
	return len(c.d.cache.base)
}

// Token is the version c's cache is current at: the resume token it would send.
func Token(c *Client) string { return c.d.cache.token() }
