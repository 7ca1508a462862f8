package main

// Kubernetes objects as the deploy tests read them: only the fields the checks use.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"testing"

	"gopkg.in/yaml.v3"
)

// --- Kubernetes objects, only the fields the checks read -------------------------------

type objectMeta struct {
	Name        string
	Namespace   string
	Labels      map[string]string
	Annotations map[string]string
}

type object struct {
	Kind     string
	Metadata objectMeta
	Data     map[string]string // ConfigMap
	where    string            // file, document and name, for messages
	node     *yaml.Node
}

type podTemplate struct {
	Spec struct {
		Template struct {
			Metadata objectMeta
			Spec     podSpec
		}
	}
}

type podSpec struct {
	TerminationGracePeriodSeconds *int   `yaml:"terminationGracePeriodSeconds"`
	ServiceAccountName            string `yaml:"serviceAccountName"`
	AutomountServiceAccountToken  *bool  `yaml:"automountServiceAccountToken"`
	HostNetwork                   bool   `yaml:"hostNetwork"`
	DNSPolicy                     string `yaml:"dnsPolicy"`
	Tolerations                   []toleration
	InitContainers                []container `yaml:"initContainers"`
	Containers                    []container
	Volumes                       []volume
}

type toleration struct {
	Key      string
	Operator string
	Effect   string
}

type container struct {
	Name           string
	Image          string
	Command        []string
	Args           []string
	Env            []envVar
	Ports          []portSpec
	VolumeMounts   []volumeMount `yaml:"volumeMounts"`
	ReadinessProbe *probe        `yaml:"readinessProbe"`
	LivenessProbe  *probe        `yaml:"livenessProbe"`
}

type volumeMount struct {
	Name      string
	MountPath string `yaml:"mountPath"`
	ReadOnly  bool   `yaml:"readOnly"`
}

type portSpec struct {
	Name          string
	ContainerPort int `yaml:"containerPort"`
}

type servicePort struct {
	Name       string
	Port       int
	TargetPort string `yaml:"targetPort"`
}

type envVar struct {
	Name      string
	Value     *string
	ValueFrom *struct {
		FieldRef *struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
	} `yaml:"valueFrom"`
}

type volume struct {
	Name      string
	ConfigMap *struct {
		Name string
	} `yaml:"configMap"`
	EmptyDir              *struct{} `yaml:"emptyDir"`
	PersistentVolumeClaim *struct {
		ClaimName string `yaml:"claimName"`
	} `yaml:"persistentVolumeClaim"`
	HostPath *struct {
		Path string
		Type string
	} `yaml:"hostPath"`
}

// RBAC: Roles and ClusterRoles, and what binds them to ServiceAccounts.

type policyRule struct {
	APIGroups     []string `yaml:"apiGroups"`
	Resources     []string
	ResourceNames []string `yaml:"resourceNames"`
	Verbs         []string
}

type role struct {
	Rules []policyRule
}

type roleBinding struct {
	RoleRef struct {
		Kind string
		Name string
	} `yaml:"roleRef"`
	Subjects []struct {
		Kind      string
		Name      string
		Namespace string
	}
}

type probe struct {
	HTTPGet *struct {
		Path string
		Port string
	} `yaml:"httpGet"`
}

type service struct {
	Spec struct {
		Selector map[string]string
		Ports    []servicePort
	}
}

type selectorSpec struct {
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		}
	}
}

// pod is one workload's pod template.
type pod struct {
	where     string
	kind      string // of the workload
	namespace string
	labels    map[string]string
	spec      podSpec
}

// fieldRefSamples stand in for what the downward API gives a pod.
var fieldRefSamples = map[string]string{"status.hostIP": "192.0.2.10", "spec.nodeName": "node-1"}

// value returns what the container sees as e on a sample node: its value, or a sample
// of what the downward API gives.
func (e envVar) value() (string, error) {
	switch {
	case e.Value != nil:
		return *e.Value, nil
	case e.ValueFrom == nil:
		return "", fmt.Errorf("env %s has neither value nor valueFrom", e.Name)
	case e.ValueFrom.FieldRef == nil:
		return "", fmt.Errorf("env %s: valueFrom without fieldRef: teach deploy_test.go a sample for it", e.Name)
	}
	v, ok := fieldRefSamples[e.ValueFrom.FieldRef.FieldPath]
	if !ok {
		return "", fmt.Errorf("env %s: fieldRef %s is not a downward API field deploy_test.go knows", e.Name, e.ValueFrom.FieldRef.FieldPath)
	}
	return v, nil
}

// containerEnv returns c's environment on a sample node; a later entry for a name wins,
// as in Kubernetes. Entries without a value are left out and reported.
func containerEnv(c container) (map[string]string, []error) {
	env := map[string]string{}
	var errs []error
	for _, e := range c.Env {
		v, err := e.value()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		env[e.Name] = v
	}
	return env, errs
}

func yamlFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if ext := path.Ext(e.Name()); ext == ".yaml" || ext == ".yml" {
			out = append(out, e.Name())
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no YAML files", dir)
	}
	return out
}

// decodeObjects splits a multi-document file and decodes each non-empty document.
func decodeObjects(t *testing.T, name string, data []byte) []object {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []object
	for i := 0; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", name, i, err)
		}
		if len(n.Content) == 0 || n.Content[0].Tag == "!!null" {
			continue // an empty document, e.g. a disabled Helm template
		}
		o := object{node: &n}
		if err := n.Decode(&o); err != nil {
			t.Fatalf("%s: document %d: %v", name, i, err)
		}
		if o.Kind == "" {
			t.Errorf("%s: document %d has no kind", name, i)
		}
		o.where = fmt.Sprintf("%s#%d %s/%s", name, i, o.Kind, o.Metadata.Name)
		out = append(out, o)
	}
}

func decodeAs(t *testing.T, o object, v any) {
	t.Helper()
	if err := o.node.Decode(v); err != nil {
		t.Fatalf("%s: %v", o.where, err)
	}
}

func checkKustomization(t *testing.T, dir string, files []string) {
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct{ Resources []string }
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	want := slices.DeleteFunc(slices.Clone(files), func(f string) bool { return f == "kustomization.yaml" })
	got := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("kustomization.yaml lists %v, the directory holds %v", got, want)
	}
}
