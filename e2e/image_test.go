//go:build image

package e2e

// The image built by `go tool task image` (deploy/image/build.sh), run.
// Podman is tried first; where it cannot run containers (on the machines
// this project is built on it cannot: crun's setrlimit is refused without
// CAP_SYS_RESOURCE, and crun does not support their hybrid cgroup
// hierarchy), warmpath runs from the image's own root filesystem under
// chroot as the image's user, so the image's files (loader, libczmq, CA
// bundle, users) are what is tested, without a container runtime's
// isolation. `go tool task image:test` runs it.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/e2e/envoytest"
)

func TestImageRuns(t *testing.T) {
	layout := os.Getenv("WARMPATH_IMAGE")
	if layout == "" {
		layout = filepath.Join(envoytest.RepoRoot(t), "dist/image/oci")
	}
	if _, err := os.Stat(filepath.Join(layout, "index.json")); err != nil {
		t.Fatalf("no image at %s (go tool task image builds it): %v", layout, err)
	}
	const image, user = "warmpath", "65532:65532"

	dir := t.TempDir()
	// Podman in a throwaway store (vfs and cgroupfs, which work without
	// systemd and overlay mounts, as in a container).
	podman := []string{"podman", "--root", filepath.Join(dir, "store"), "--runroot", filepath.Join(dir, "run"),
		"--storage-driver", "vfs", "--cgroup-manager", "cgroupfs"}
	var command []string // runs the image's warmpath
	archive := filepath.Join(filepath.Dir(layout), "warmpath-oci.tar")
	if out, err := exec.Command(podman[0], append(podman[1:], "load", "-q", "-i", archive)...).CombinedOutput(); err != nil {
		t.Logf("podman cannot load the image here, so it runs under chroot: %v: %s", err, strings.TrimSpace(string(out)))
	} else if out, err := exec.Command(podman[0], append(podman[1:], "run", "--rm", "--network", "host", "localhost/"+image, "version")...).CombinedOutput(); err != nil {
		t.Logf("podman cannot run the image here, so it runs under chroot: %v: %s", err, strings.TrimSpace(string(out)))
	} else {
		command = append(podman, "run", "--rm", "--network", "host", "-v", "CONFIG:/etc/warmpath:ro", "localhost/"+image)
	}
	bundle := filepath.Join(dir, "bundle")
	if out, err := exec.Command("umoci", "unpack", "--image", layout+":"+image, bundle).CombinedOutput(); err != nil {
		t.Fatalf("umoci unpack: %v\n%s", err, out)
	}
	rootfs := filepath.Join(bundle, "rootfs")
	confDir := filepath.Join(rootfs, "etc/warmpath")
	if command == nil {
		if os.Geteuid() != 0 {
			t.Fatal("neither podman nor chroot (needs root) can run the image here")
		}
		command = []string{"chroot", "--userspec=" + user, rootfs, "/usr/local/bin/warmpath"}
	} else {
		confDir = filepath.Join(dir, "conf")
		if err := os.MkdirAll(confDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, a := range command {
			command[i] = strings.Replace(a, "CONFIG", confDir, 1)
		}
	}

	out, err := exec.Command(command[0], append(command[1:], "version")...).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "warmpath ") {
		t.Fatalf("warmpath version in the image: %v: %q", err, out)
	}
	t.Logf("in the image: %s", strings.TrimSpace(string(out)))

	w := startSim(t, "w0", false)
	if err := os.WriteFile(filepath.Join(confDir, "warmpath.yaml"), []byte(healthConfig("1h", "", w)), 0o644); err != nil {
		t.Fatal(err)
	}
	wp := runWarmpath(t, command, "/etc/warmpath/warmpath.yaml")
	if code := wp.adminStatus(t, "/healthz"); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}
	waitFor(t, "warmpath ready", func() bool { return wp.readyz(t) == 200 })
	e := startEnvoy(t, "envoy/envoy.yaml", wp.ExtProc)
	r := send(t, "http://"+e.Listeners["llm_ingress"], 4)
	if r.status != 200 || r.worker != "w0" {
		t.Fatalf("through Envoy: status %d, worker %q: %.300s", r.status, r.worker, r.body)
	}
}
