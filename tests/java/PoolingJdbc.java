// pgjdbc clients for tests/tests/pooling_jdbc.rs. With prepareThreshold=1
// every PreparedStatement is a named server statement (S_1, S_2, ... on
// each connection) from its first execution.
//
//   java PoolingJdbc work PORT USER
//     8 connections (threads) run prepared SELECTs, a batch insert and
//     transactions, in step; prints what they read, in thread order (the
//     same whoever serves them), then READY, and keeps its connections
//     open until a line comes on stdin.
//   java PoolingJdbc hold PORT USER
//     one connection that ran LISTEN, one inside a transaction, and three
//     whose statements wait for a server connection; prints READY and
//     waits to be killed.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;

public class PoolingJdbc {
    static final int THREADS = 8;
    static final int ROUNDS = 3;
    static final int SELECTS = 40;
    static final int BATCH = 25;

    static String url;
    static String user;
    /** Set when a client fails: the others stop at their next step. */
    static volatile boolean failed;

    public static void main(String[] args) throws Exception {
        url = "jdbc:postgresql://127.0.0.1:" + args[1] + "/postgres";
        user = args[2];
        switch (args[0]) {
            case "work":
                work();
                break;
            case "hold":
                hold();
                break;
            default:
                throw new IllegalArgumentException(args[0]);
        }
    }

    static Connection open() throws SQLException {
        Properties p = new Properties();
        p.setProperty("user", user);
        p.setProperty("prepareThreshold", "1");
        p.setProperty("sslmode", "disable");
        p.setProperty("connectTimeout", "20");
        p.setProperty("socketTimeout", "60");
        return DriverManager.getConnection(url, p);
    }

    static void work() throws Exception {
        try (Connection c = open(); Statement s = c.createStatement()) {
            s.execute("DROP TABLE IF EXISTS jdbc_items, jdbc_batch, jdbc_accounts");
            s.execute("CREATE TABLE jdbc_items (id int PRIMARY KEY, name text)");
            s.execute("INSERT INTO jdbc_items SELECT i, 'item ' || i FROM generate_series(1, 60) i");
            s.execute("CREATE TABLE jdbc_batch (thread int, round int, i int, v text)");
            s.execute("CREATE TABLE jdbc_accounts (id int PRIMARY KEY, balance int)");
        }
        CyclicBarrier step = new CyclicBarrier(THREADS);
        List<List<String>> outs = new ArrayList<>();
        Connection[] conns = new Connection[THREADS];
        Thread[] threads = new Thread[THREADS];
        for (int t = 0; t < THREADS; t++) {
            List<String> out = new ArrayList<>();
            outs.add(out);
            final int id = t;
            threads[t] = new Thread(() -> {
                try {
                    conns[id] = open();
                    client(id, conns[id], step, out);
                } catch (Exception e) {
                    out.add("t" + id + " failed: " + describe(e));
                    failed = true;
                    step.reset();
                }
            });
            threads[t].start();
        }
        for (Thread th : threads) {
            th.join(TimeUnit.SECONDS.toMillis(120));
        }
        for (List<String> out : outs) {
            out.forEach(System.out::println);
        }
        try (Connection c = open(); Statement s = c.createStatement();
             ResultSet rs = s.executeQuery(
                 "SELECT (SELECT count(*) FROM jdbc_batch), (SELECT sum(balance) FROM jdbc_accounts)")) {
            rs.next();
            System.out.println("total batch rows=" + rs.getLong(1) + " balances=" + rs.getLong(2));
        } catch (SQLException e) {
            System.out.println("totals failed: " + describe(e));
        }
        System.out.println("READY");
        System.out.flush();
        new BufferedReader(new InputStreamReader(System.in)).readLine();
        for (Connection c : conns) {
            if (c != null) {
                c.close();
            }
        }
    }

    /** Waits for the other clients, in step; fails if one of them failed. */
    static void together(CyclicBarrier step) throws Exception {
        if (failed) {
            throw new IllegalStateException("another client failed");
        }
        step.await(30, TimeUnit.SECONDS);
    }

    static void client(int t, Connection c, CyclicBarrier step, List<String> out) throws Exception {
        for (int round = 0; round < ROUNDS; round++) {
            together(step);
            // Prepared SELECTs with parameters, many times over.
            try (PreparedStatement ps = c.prepareStatement(
                     "SELECT id, name, ?::int * id FROM jdbc_items WHERE id BETWEEN ? AND ? ORDER BY id");
                 PreparedStatement text = c.prepareStatement("SELECT upper(?) || ':' || length(?)")) {
                long sum = 0;
                int rows = 0;
                String last = "";
                for (int i = 0; i < SELECTS; i++) {
                    int from = (i * 7 + t * 3 + round) % 55 + 1;
                    ps.setInt(1, t + 1);
                    ps.setInt(2, from);
                    ps.setInt(3, from + 4);
                    try (ResultSet rs = ps.executeQuery()) {
                        while (rs.next()) {
                            rows++;
                            sum += rs.getLong(3);
                            last = rs.getString(2);
                        }
                    }
                    if (i % 10 == 0) {
                        String word = "w" + t + "r" + round + "i" + i;
                        text.setString(1, word);
                        text.setString(2, word);
                        try (ResultSet rs = text.executeQuery()) {
                            rs.next();
                            last = last + "/" + rs.getString(1);
                        }
                    }
                }
                out.add(String.format("t%d r%d select rows=%d sum=%d last=%s", t, round, rows, sum, last));
            }
            together(step);
            // A batch insert, then what it inserted.
            try (PreparedStatement ins = c.prepareStatement(
                     "INSERT INTO jdbc_batch (thread, round, i, v) VALUES (?, ?, ?, ?)");
                 PreparedStatement sel = c.prepareStatement(
                     "SELECT count(*), sum(i), string_agg(v, ',' ORDER BY i) FROM jdbc_batch "
                         + "WHERE thread = ? AND round = ?")) {
                for (int i = 0; i < BATCH; i++) {
                    ins.setInt(1, t);
                    ins.setInt(2, round);
                    ins.setInt(3, i);
                    ins.setString(4, "v" + (i * t + round));
                    ins.addBatch();
                }
                int[] counts = ins.executeBatch();
                int inserted = 0;
                for (int n : counts) {
                    inserted += n;
                }
                sel.setInt(1, t);
                sel.setInt(2, round);
                try (ResultSet rs = sel.executeQuery()) {
                    rs.next();
                    out.add(String.format("t%d r%d batch %d statements, %d rows; read %d rows sum=%d %s",
                        t, round, counts.length, inserted, rs.getLong(1), rs.getLong(2), rs.getString(3)));
                }
            }
            together(step);
            // A transaction that commits, one that rolls back.
            c.setAutoCommit(false);
            try (PreparedStatement ins = c.prepareStatement(
                     "INSERT INTO jdbc_accounts (id, balance) VALUES (?, ?) "
                         + "ON CONFLICT (id) DO UPDATE SET balance = jdbc_accounts.balance + excluded.balance");
                 PreparedStatement upd = c.prepareStatement(
                     "UPDATE jdbc_accounts SET balance = balance - ? WHERE id = ?");
                 PreparedStatement sel = c.prepareStatement(
                     "SELECT balance, now() = statement_timestamp() FROM jdbc_accounts WHERE id = ?")) {
                ins.setInt(1, t);
                ins.setInt(2, 100);
                ins.executeUpdate();
                upd.setInt(1, round + 1);
                upd.setInt(2, t);
                int updated = upd.executeUpdate();
                sel.setInt(1, t);
                String seen;
                try (ResultSet rs = sel.executeQuery()) {
                    rs.next();
                    // now() is the transaction's start: equal to the
                    // statement's time only if the statement began it.
                    seen = rs.getInt(1) + " one transaction=" + !rs.getBoolean(2);
                }
                c.commit();
                ins.setInt(1, 1000 + t * 10 + round);
                ins.setInt(2, 5);
                ins.executeUpdate();
                c.rollback();
                c.setAutoCommit(true);
                sel.setInt(1, 1000 + t * 10 + round);
                boolean gone;
                try (ResultSet rs = sel.executeQuery()) {
                    gone = !rs.next();
                }
                out.add(String.format("t%d r%d transaction updated=%d balance=%s rolled back=%b",
                    t, round, updated, seen, gone));
            } finally {
                c.setAutoCommit(true);
            }
        }
    }

    static void hold() throws Exception {
        Connection pinned = open();
        try (Statement s = pinned.createStatement()) {
            s.execute("LISTEN jdbc_x");
        }
        Connection inTransaction = open();
        inTransaction.setAutoCommit(false);
        try (Statement s = inTransaction.createStatement(); ResultSet rs = s.executeQuery("SELECT 1")) {
            rs.next();
        }
        for (int i = 0; i < 3; i++) {
            Thread waiter = new Thread(() -> {
                try (Connection c = open(); Statement s = c.createStatement()) {
                    s.executeQuery("SELECT 'waited'").close();
                    System.out.println("a waiter was served");
                } catch (SQLException e) {
                    System.out.println("waiter: " + describe(e));
                }
            });
            waiter.setDaemon(true);
            waiter.start();
        }
        System.out.println("READY");
        System.out.flush();
        Thread.sleep(TimeUnit.MINUTES.toMillis(10));
    }

    static String describe(Exception e) {
        if (e instanceof SQLException) {
            return ((SQLException) e).getSQLState() + " " + e.getMessage();
        }
        return e.toString();
    }
}
