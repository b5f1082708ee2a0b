package io.lockstep.flink;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * The release broker binary as a child process of the test: loopback, a free port, a temporary data
 * directory; SIGKILL and restart on the same port and directory. The binary comes from the system
 * property {@code lockstep.bin} (set by the Maven build), else {@code LOCKSTEP_BIN}.
 */
final class LockstepBroker implements AutoCloseable {
    private static final long START_TIMEOUT_MS = 30_000;
    /** Starts tried before giving up (one broker start in the whole suite once hung; its log is printed). */
    private static final int START_ATTEMPTS = 2;

    private final Path binary;
    private final Path dataDir;
    private final int port;
    private final Path log;
    private Process process;

    private LockstepBroker(Path binary, Path dataDir, int port) {
        this.binary = binary;
        this.dataDir = dataDir;
        this.port = port;
        this.log = dataDir.resolveSibling(dataDir.getFileName() + ".log");
    }

    /** Starts a broker on a free loopback port with data in {@code dataDir}. */
    static LockstepBroker start(Path dataDir) throws IOException, InterruptedException {
        String bin = System.getProperty("lockstep.bin", System.getenv("LOCKSTEP_BIN"));
        if (bin == null || !new File(bin).canExecute()) {
            throw new IllegalStateException("no broker binary: build it (cargo build --release --bin lockstep) and"
                    + " pass -Dlockstep.bin=PATH (got " + bin + ")");
        }
        int port;
        try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            port = s.getLocalPort();
        }
        LockstepBroker broker = new LockstepBroker(Path.of(bin), dataDir, port);
        broker.launch();
        return broker;
    }

    String bootstrap() {
        return "127.0.0.1:" + port;
    }

    private void launch() throws IOException, InterruptedException {
        for (int attempt = 1; ; attempt++) {
            try {
                launchOnce();
                return;
            } catch (IllegalStateException e) {
                if (attempt >= START_ATTEMPTS) {
                    throw e;
                }
                System.out.println("[lockstep-broker] start attempt " + attempt + " failed, retrying: " + e.getMessage());
            }
        }
    }

    private void launchOnce() throws IOException, InterruptedException {
        Files.createDirectories(dataDir);
        ProcessBuilder pb = new ProcessBuilder(List.of(binary.toString(), "--listen", bootstrap(),
                "--data-dir", dataDir.toString()));
        pb.redirectError(ProcessBuilder.Redirect.appendTo(log.toFile()));
        pb.environment().putIfAbsent("RUST_LOG", "warn");
        process = pb.start();
        CompletableFuture<Boolean> ready = new CompletableFuture<>();
        Process p = process;
        Thread reader = new Thread(() -> {
            try (BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = out.readLine()) != null) {
                    if (line.startsWith("lockstep ready")) {
                        ready.complete(true);
                    }
                }
            } catch (IOException e) {
                // the process went away
            }
            ready.complete(false);
        }, "lockstep-broker-stdout");
        reader.setDaemon(true);
        reader.start();
        try {
            if (!ready.get(START_TIMEOUT_MS, TimeUnit.MILLISECONDS)) {
                throw new IllegalStateException("broker exited before it was ready: " + logTail());
            }
        } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException e) {
            process.destroyForcibly();
            process.waitFor(10, TimeUnit.SECONDS);
            throw new IllegalStateException("broker not ready in " + START_TIMEOUT_MS + " ms: " + logTail(), e);
        }
    }

    private String logTail() {
        try {
            List<String> lines = Files.readAllLines(log, StandardCharsets.UTF_8);
            return log + ":\n" + String.join("\n", lines.subList(Math.max(0, lines.size() - 20), lines.size()));
        } catch (IOException e) {
            return log + " (unreadable: " + e + ")";
        }
    }

    /** SIGKILL (no clean shutdown), then wait for the process to be gone. */
    void kill() throws InterruptedException {
        process.destroyForcibly();
        process.waitFor(30, TimeUnit.SECONDS);
    }

    /** Starts the broker again on the same port and data directory. */
    void restart() throws IOException, InterruptedException {
        launch();
    }

    @Override
    public void close() {
        if (process != null && process.isAlive()) {
            process.destroy();
            try {
                if (!process.waitFor(10, TimeUnit.SECONDS)) {
                    process.destroyForcibly();
                    process.waitFor(10, TimeUnit.SECONDS);
                }
            } catch (InterruptedException e) {
                process.destroyForcibly();
                Thread.currentThread().interrupt();
            }
        }
    }
}
