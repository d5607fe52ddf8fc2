// Command elector is the peer leaderd is measured against (issue #39): a
// candidate written the way client-go's own example elects, with
// k8s.io/client-go/tools/leaderelection on a LeaseLock (15 s / 10 s / 2 s
// by default, ReleaseOnCancel), that runs a command while it leads. It is
// test tooling, built by scripts/lib/ensure-kube.sh into the cache beside
// kube-apiserver; nothing of leaderd links it.
//
//	elector --kubeconfig F --namespace NS --lease NAME --id ID [--lease-duration 15s]
//	        [--renew-deadline 10s] [--retry-period 2s] [--log FILE] -- COMMAND ARGS...
//
// On SIGTERM or SIGINT it stops the command first (SIGTERM to its process
// group, SIGKILL after --stop-timeout) and only then cancels the elector,
// whose ReleaseOnCancel then releases the Lease: what a careful user
// writes, since client-go itself releases before OnStoppedLeading runs and
// before OnStartedLeading's context is cancelled. The command dies with
// this process (PR_SET_PDEATHSIG), as leaderd's child does.
//
// The log, if given, gets one line per event, on CLOCK_MONOTONIC in ns like
// leaderd's probe child: `leading NS`, `stopped NS`, `released NS`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"golang.org/x/sys/unix"
)

func init() {
	// PR_SET_PDEATHSIG follows the thread that forked the child: fork every
	// child from the main goroutine, locked to the main thread, which lives
	// as long as the process.
	runtime.LockOSThread()
}

var logFile *os.File

func event(what string) {
	if logFile == nil {
		return
	}
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	fmt.Fprintf(logFile, "%s %d\n", what, ts.Nano())
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	namespace := flag.String("namespace", "default", "the Lease's namespace")
	lease := flag.String("lease", "", "the Lease's name")
	id := flag.String("id", "", "this candidate's identity")
	duration := flag.Duration("lease-duration", 15*time.Second, "LeaseDuration")
	deadline := flag.Duration("renew-deadline", 10*time.Second, "RenewDeadline")
	retry := flag.Duration("retry-period", 2*time.Second, "RetryPeriod")
	stopTimeout := flag.Duration("stop-timeout", 10*time.Second, "SIGTERM to SIGKILL")
	logPath := flag.String("log", "", "event log")
	flag.Parse()
	command := flag.Args()
	if *lease == "" || *id == "" || len(command) == 0 {
		fmt.Fprintln(os.Stderr, "usage: elector --kubeconfig F --lease NAME --id ID -- COMMAND ARGS...")
		os.Exit(2)
	}
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		logFile = f
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	client := kubernetes.NewForConfigOrDie(config)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: *lease, Namespace: *namespace},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: *id},
	}

	// The main thread forks the child and stops it; the elector's
	// callbacks ask it to.
	start := make(chan struct{}, 1)
	lost := make(chan struct{}, 1)
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock:            lock,
			ReleaseOnCancel: true,
			LeaseDuration:   *duration,
			RenewDeadline:   *deadline,
			RetryPeriod:     *retry,
			Name:            *lease,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { start <- struct{}{} },
				OnStoppedLeading: func() { lost <- struct{}{} },
			},
		})
		event("released")
		close(done)
	}()

	var child *exec.Cmd
	exited := make(chan struct{})
	stop := func() {
		if child == nil {
			return
		}
		_ = syscall.Kill(-child.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(*stopTimeout):
			_ = syscall.Kill(-child.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		child = nil
		event("stopped")
	}
	for {
		select {
		case <-start:
			event("leading")
			child = exec.Command(command[0], command[1:]...)
			child.Stdout, child.Stderr = os.Stdout, os.Stderr
			child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			if err := child.Start(); err != nil {
				fmt.Fprintln(os.Stderr, "cannot start the command:", err)
				os.Exit(1)
			}
			exited = make(chan struct{})
			go func(c *exec.Cmd, exited chan struct{}) { _ = c.Wait(); close(exited) }(child, exited)
		case <-signals:
			stop()
			cancel()
			<-done
			os.Exit(0)
		case <-lost:
			// The lease was lost (or released after a signal): the work
			// stops, and this candidate exits as client-go's example does.
			stop()
			<-done
			os.Exit(1)
		}
	}
}
