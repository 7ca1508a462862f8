package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"
)

// checkOutput accepts the --output formats of the command being run: table, json or
// yaml. topology has a --output of its own (a drawing) and checks it itself.
func (o *ctlOptions) checkOutput(cmd *cobra.Command) error {
	if cmd.Name() == "topology" {
		return nil
	}
	switch o.output {
	case "table", "json", "yaml":
		return nil
	}
	return usagef("--output %q: want table, json or yaml", o.output)
}

// writeView writes v, a view of a response shaped for people, as JSON or YAML.
func (o *ctlOptions) writeView(out io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if o.output == "yaml" {
		return jsonToYAML(out, b)
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}

// writeStructured writes a response as JSON or YAML, with the field names of the
// API's JSON form in both.
func (o *ctlOptions) writeStructured(out io.Writer, m proto.Message) error {
	if o.output == "yaml" {
		return writeProtoYAML(out, m)
	}
	return writeProtoJSON(out, m)
}

// jsonToYAML converts JSON to YAML through a yaml.Node, which keeps the JSON's
// field order (a map would sort it).
func jsonToYAML(out io.Writer, jsonText []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(jsonText, &doc); err != nil {
		return fmt.Errorf("yaml output: %w", err)
	}
	blockStyle(&doc)
	enc := yaml.NewEncoder(out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return fmt.Errorf("yaml output: %w", err)
	}
	return enc.Close()
}

// writeProtoYAML writes m's JSON form as YAML.
func writeProtoYAML(out io.Writer, m proto.Message) error {
	var b strings.Builder
	if err := writeProtoJSON(&b, m); err != nil {
		return err
	}
	// Check it is JSON first: yaml would accept much that is not.
	if !json.Valid([]byte(b.String())) {
		return fmt.Errorf("yaml output: the response did not encode as JSON")
	}
	return jsonToYAML(out, []byte(b.String()))
}

// blockStyle drops the flow style JSON parses into ({...} and [...]), and quotes
// only where YAML needs them, so the output reads like hand-written YAML.
func blockStyle(n *yaml.Node) {
	switch n.Kind {
	case yaml.MappingNode, yaml.SequenceNode:
		n.Style = 0
	case yaml.ScalarNode:
		if n.Style == yaml.DoubleQuotedStyle {
			n.Style = 0 // the encoder quotes a string that would read as another type
		}
	}
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// stateFlags are a list command's --all and --status: applied records by default.
type stateFlags struct {
	all    bool
	status []string
}

func (s *stateFlags) register(c *cobra.Command, states string) {
	c.Flags().BoolVar(&s.all, "all", false, "list records in every state, not only applied ones")
	c.Flags().StringSliceVar(&s.status, "status", nil, "list records in these states ("+states+")")
}

// statuses is the request's filter: none for --all, the --status list, else applied.
func (s *stateFlags) statuses() []string {
	switch {
	case s.all:
		return nil
	case len(s.status) > 0:
		return s.status
	}
	return []string{"applied"}
}

// positionalOrFlag takes a value given either as an argument or as flag; both at
// once must agree.
func positionalOrFlag(args []string, flagValue, flagName string) (string, error) {
	if len(args) == 0 {
		return flagValue, nil
	}
	if flagValue != "" && flagValue != args[0] {
		return "", usagef("%s %q and the argument %q disagree: give one", flagName, flagValue, args[0])
	}
	return args[0], nil
}

// requiredNode is the node a per-node list is about, as argument or --node.
func requiredNode(args []string, flagValue string) (string, error) {
	node, err := positionalOrFlag(args, flagValue, "--node")
	if err == nil && node == "" {
		err = usagef("a node id is required: list {group}/{node}")
	}
	return node, err
}
