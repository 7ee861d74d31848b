package deploy_test

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/config"
)

// manifests decodes every document of a manifest file strictly into the
// Kubernetes API types: an unknown or misspelt field is an error.
type manifests struct {
	configMaps  map[string]*corev1.ConfigMap
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
}

func load(t *testing.T, file string) manifests {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := manifests{configMaps: map[string]*corev1.ConfigMap{}, deployments: map[string]*appsv1.Deployment{},
		services: map[string]*corev1.Service{}}
	for i, doc := range bytes.Split(data, []byte("\n---\n")) {
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("%s #%d: %v", file, i, err)
		}
		var obj any
		var name func() string
		switch head.APIVersion + " " + head.Kind {
		case "v1 ConfigMap":
			o := &corev1.ConfigMap{}
			obj, name = o, func() string { m.configMaps[o.Name] = o; return o.Name }
		case "apps/v1 Deployment":
			o := &appsv1.Deployment{}
			obj, name = o, func() string { m.deployments[o.Name] = o; return o.Name }
		case "v1 Service":
			o := &corev1.Service{}
			obj, name = o, func() string { m.services[o.Name] = o; return o.Name }
		default:
			t.Fatalf("%s #%d: unexpected %s %s", file, i, head.APIVersion, head.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatalf("%s #%d (%s): %v", file, i, head.Kind, err)
		}
		if name() == "" {
			t.Fatalf("%s #%d: no name", file, i)
		}
	}
	return m
}

// Every manifest decodes strictly into the k8s.io/api types, and its
// wiring agrees with the sluice configuration it ships: the ConfigMap's
// sluice.yaml validates; it is mounted as a directory (so that updates
// arrive) where the args point; the container ports are the config's
// listen and admin ports; the probes ask /healthz and /readyz on the
// admin port; the upstream is the app container's loopback port; the
// Service sends traffic to sluice, never to the app or the admin port.
func TestKubernetesManifests(t *testing.T) {
	files, _ := filepath.Glob("kubernetes/*.yaml")
	if len(files) < 2 {
		t.Fatalf("manifests: %v", files)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			m := load(t, file)
			if len(m.deployments) == 0 {
				t.Fatal("no Deployment")
			}
			checked := 0
			for _, d := range m.deployments {
				spec := d.Spec.Template.Spec
				i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "sluice" })
				if i < 0 {
					continue
				}
				checked++
				checkSidecar(t, m, d, spec, spec.Containers[i])
			}
			if checked == 0 {
				t.Fatal("no Deployment with a sluice container")
			}
		})
	}
}

func checkSidecar(t *testing.T, m manifests, d *appsv1.Deployment, spec corev1.PodSpec, c corev1.Container) {
	t.Helper()
	if !subset(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("%s: selector %v does not select its pods %v", d.Name, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}
	// The config file the args name, in a mounted ConfigMap directory.
	cfgPath := ""
	for i, a := range c.Args {
		if a == "-config" && i+1 < len(c.Args) {
			cfgPath = c.Args[i+1]
		}
	}
	if cfgPath == "" || c.Args[0] != "run" {
		t.Fatalf("%s: args %v: want run -config FILE", d.Name, c.Args)
	}
	var cm *corev1.ConfigMap
	for _, vm := range c.VolumeMounts {
		if filepath.Dir(cfgPath) != vm.MountPath {
			continue
		}
		if vm.SubPath != "" {
			t.Errorf("%s: the rules are mounted with subPath: updates would never reach the pod", d.Name)
		}
		for _, v := range spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil {
				cm = m.configMaps[v.ConfigMap.Name]
			}
		}
	}
	if cm == nil {
		t.Fatalf("%s: no ConfigMap mounted at %s", d.Name, filepath.Dir(cfgPath))
	}
	text, ok := cm.Data[filepath.Base(cfgPath)]
	if !ok {
		t.Fatalf("%s: ConfigMap %s has no %s", d.Name, cm.Name, filepath.Base(cfgPath))
	}
	cfg, err := config.Parse(cm.Name+"/"+filepath.Base(cfgPath), []byte(text))
	if err != nil {
		t.Fatalf("%s: %v", d.Name, err)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if got := port(t, cfg.Listen); ports["http"] != got {
		t.Errorf("%s: container port http %d, config listen %s", d.Name, ports["http"], cfg.Listen)
	}
	if got := port(t, cfg.Admin); ports["admin"] != got {
		t.Errorf("%s: container port admin %d, config admin %s", d.Name, ports["admin"], cfg.Admin)
	}
	for name, pr := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != name || (pr.HTTPGet.Port.StrVal != "admin" && pr.HTTPGet.Port.IntVal != ports["admin"]) {
			t.Errorf("%s: want a probe on %s at the admin port, got %+v", d.Name, name, pr)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("%s: want cpu and memory requests and a memory limit, got %+v", d.Name, c.Resources)
	}
	// The upstream is another container of the pod on loopback.
	upPort := port(t, strings.TrimPrefix(cfg.Upstream, "http://"))
	if !strings.HasPrefix(cfg.Upstream, "http://127.0.0.1:") {
		t.Errorf("%s: upstream %s is not on the pod's loopback", d.Name, cfg.Upstream)
	}
	found := false
	for _, other := range spec.Containers {
		for _, a := range other.Args {
			found = found || (other.Name != "sluice" && strings.Contains(a, "127.0.0.1:"+strconv.Itoa(int(upPort))))
		}
	}
	if !found {
		t.Errorf("%s: no app container listens on 127.0.0.1:%d", d.Name, upPort)
	}
	// A Service selecting these pods targets sluice's http port only.
	for _, s := range m.services {
		if !subset(s.Spec.Selector, d.Spec.Template.Labels) {
			continue
		}
		for _, sp := range s.Spec.Ports {
			if sp.TargetPort.StrVal != "http" && sp.TargetPort.IntVal != ports["http"] {
				t.Errorf("%s: Service %s sends port %d to %s, not to sluice", d.Name, s.Name, sp.Port, sp.TargetPort.String())
			}
		}
	}
	if d.Spec.Template.Spec.TerminationGracePeriodSeconds == nil || *d.Spec.Template.Spec.TerminationGracePeriodSeconds < int64(cfg.ShutdownGrace.D().Seconds()) {
		t.Errorf("%s: terminationGracePeriodSeconds below shutdown_grace %v", d.Name, cfg.ShutdownGrace.D())
	}
}

func port(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return int32(n)
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// The strict decoding is strict: a misspelt field fails.
func TestKubernetesDecodingIsStrict(t *testing.T) {
	doc := []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      containers:\n        - name: sluice\n          readinesProbe: {}\n")
	if err := yaml.UnmarshalStrict(doc, &appsv1.Deployment{}); err == nil || !strings.Contains(err.Error(), "readinesProbe") {
		t.Fatalf("a misspelt field decoded: %v", err)
	}
}
