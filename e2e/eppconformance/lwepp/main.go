// Command lwepp runs the Gateway API Inference Extension's reference
// endpoint picker (the lightweight EPP, sigs.k8s.io/gateway-api-inference-extension
// pkg/lwepp) without a Kubernetes cluster, so that the endpoint-picker
// conformance suite (package eppconformance) can be run against it.
//
// The reference's own main (cmd/lwepp) needs an API server: its datastore is
// filled by controller-runtime reconcilers that watch the InferencePool and
// its Pods. This wrapper fills the same datastore through its exported API
// instead: one InferencePool whose targetPorts are the endpoints' ports and
// one Pod per endpoint host, Ready, with the
// inference.networking.k8s.io/active-ports annotation naming that host's
// ports, exactly as the pod reconciler would hand them over. The ext_proc
// service is the reference's unmodified handlers.StreamingServer. The health
// services are wired as the reference's ExtProcServerRunner wires them: the
// ext_proc service name SERVING on the ext_proc port, and "inference-extension"
// on a separate health port, SERVING once the pool is in the datastore (it
// is from the start here). Both listen on loopback, on the addresses given.
//
// This is a module of its own (a tools-style module): the product never
// builds against the reference, and nothing of it is vendored.
//
// Usage:
//
//	lwepp -extproc 127.0.0.1:0 -health 127.0.0.1:0 -endpoints 127.0.0.1:8000,127.0.0.1:8001
//
// It prints "lwepp ready extproc=ADDR health=ADDR" once both listen.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/lwepp/datastore"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/lwepp/handlers"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "lwepp:", err)
		os.Exit(1)
	}
}

func run() error {
	extprocAddr := flag.String("extproc", "127.0.0.1:9002", "ext_proc gRPC listen address")
	healthAddr := flag.String("health", "127.0.0.1:9003", "gRPC health listen address (the reference's separate health port)")
	endpoints := flag.String("endpoints", "", "comma-separated ip:port list: the InferencePool's endpoints")
	verbose := flag.Bool("v", false, "log every stream")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseDevMode(*verbose), zap.WriteTo(os.Stderr)))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ds, err := poolOf(ctx, *endpoints)
	if err != nil {
		return err
	}

	eLis, err := net.Listen("tcp", *extprocAddr)
	if err != nil {
		return err
	}
	hLis, err := net.Listen("tcp", *healthAddr)
	if err != nil {
		eLis.Close()
		return err
	}
	es := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(es, handlers.NewStreamingServer(ds))
	eh := health.NewServer()
	healthpb.RegisterHealthServer(es, eh)
	eh.SetServingStatus(extprocv3.ExternalProcessor_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)

	hs := grpc.NewServer()
	hh := health.NewServer()
	healthpb.RegisterHealthServer(hs, hh)
	if ds.PoolHasSynced() {
		hh.SetServingStatus("inference-extension", healthpb.HealthCheckResponse_SERVING)
	}

	errc := make(chan error, 2)
	go func() { errc <- es.Serve(eLis) }()
	go func() { errc <- hs.Serve(hLis) }()
	fmt.Printf("lwepp ready extproc=%s health=%s\n", eLis.Addr(), hLis.Addr())
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	es.Stop()
	hs.Stop()
	if errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	return err
}

// poolOf builds the reference's datastore holding the endpoints: one pool
// whose target ports are every endpoint port, and one Ready pod per host
// whose active-ports annotation names that host's ports.
func poolOf(ctx context.Context, list string) (datastore.Datastore, error) {
	byHost := map[string][]int{}
	var hosts []string
	var ports []int
	for ep := range strings.SplitSeq(list, ",") {
		if ep = strings.TrimSpace(ep); ep == "" {
			continue
		}
		host, p, err := net.SplitHostPort(ep)
		if err != nil {
			return nil, fmt.Errorf("endpoint %q: %w", ep, err)
		}
		port, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("endpoint %q: %w", ep, err)
		}
		if _, ok := byHost[host]; !ok {
			hosts = append(hosts, host)
		}
		byHost[host] = append(byHost[host], port)
		if !slices.Contains(ports, port) {
			ports = append(ports, port)
		}
	}
	if len(hosts) == 0 {
		return nil, errors.New("-endpoints: at least one ip:port is required")
	}
	ds := datastore.NewDatastore(ctx).WithEndpointPool(&datastore.EndpointPool{
		Selector: map[string]string{"app": "conformance"}, TargetPorts: ports, Namespace: "default",
	})
	for i, host := range hosts {
		var active []string
		for _, p := range byHost[host] {
			active = append(active, strconv.Itoa(p))
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: "endpoint-" + strconv.Itoa(i), Namespace: "default",
				Labels:      map[string]string{"app": "conformance"},
				Annotations: map[string]string{"inference.networking.k8s.io/active-ports": strings.Join(active, ",")},
			},
			Status: corev1.PodStatus{
				PodIP:      host,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			},
		}
		ds.PodUpdateOrAddIfNotExist(ctx, pod)
	}
	return ds, nil
}
