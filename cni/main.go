package cni

import (
	"encoding/json"
	"log/slog"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// Versions are the CNI spec versions the plugin speaks. skel refuses a configuration
// at any other version (code 1), and CHECK below 0.4.0 and GC and STATUS below 1.1.0,
// the first versions with those commands.
var Versions = version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")

// About is printed on stderr when the plugin is run by hand.
const About = "switchboard cni: a chained CNI plugin that registers Kubernetes pods with the node's Switchboard agent"

// Main is the plugin's entry point: `switchboard` started by the runtime with
// CNI_COMMAND set. skel reads the call from the environment and stdin, checks it and
// runs the command; on error Main prints the spec's error object on stdout and exits
// 1, and on success it returns.
func Main() {
	// Warnings only: runtimes pass the plugin's stderr to their own log for every call.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p := &Plugin{Stdout: os.Stdout, Logger: logger}
	var conf []byte // the configuration, once skel has handed it to a command
	keep := func(cmd func(*skel.CmdArgs) error) func(*skel.CmdArgs) error {
		return func(args *skel.CmdArgs) error {
			conf = args.StdinData
			return cmd(args)
		}
	}
	funcs := skel.CNIFuncs{Add: keep(p.Add), Del: keep(p.Del), Check: keep(p.Check), GC: keep(p.GC), Status: keep(p.Status)}
	if e := skel.PluginMainFuncsWithError(funcs, Versions, About); e != nil {
		logger.Warn("CNI command failed", "command", os.Getenv("CNI_COMMAND"), "container", os.Getenv("CNI_CONTAINERID"), "code", e.Code, "msg", e.Error())
		if err := printError(e, conf); err != nil {
			logger.Warn("cannot print the CNI error on stdout", "err", err)
		}
		os.Exit(1)
	}
}

// printError is e.Print() with the cniVersion key the spec's error object has: the
// configuration's version when a command ran, the plugin's newest when skel refused
// the call before that.
func printError(e *types.Error, conf []byte) error {
	v, err := (&version.ConfigDecoder{}).Decode(conf)
	if err != nil || len(conf) == 0 {
		v = version.Current()
	}
	data, err := json.MarshalIndent(struct {
		CNIVersion string `json:"cniVersion"`
		*types.Error
	}{v, e}, "", "    ")
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(append(data, '\n'))
	return err
}
