package render

// Path is the file the output keeps rendered, for the agent's page.
func (o *Output) Path() string { return o.spec.Out }
