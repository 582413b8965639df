// The README's tour through the Postgres JDBC driver, printed one fact a line (tab-separated)
// for tests/test_service_jdbc.py to check against the service's stored history.
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Types;
import java.util.Properties;
import org.postgresql.util.PSQLException;

public class Tour {
    static final String TOUR = "SELECT state, COUNT(*) AS n, AVG(income) FROM people WHERE age >= 18 "
        + "GROUP BY state ORDER BY n DESC";

    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://127.0.0.1:" + args[0] + "/dpsql";
        String user = args[1], token = args[2], wrong = args[3];
        try (Connection refused = connect(url, user, wrong)) {
            System.out.println("connected\twith a wrong token");
        } catch (SQLException e) {
            error("login", e);
        }
        try (Connection c = connect(url, user, token)) {
            if (args[4].equals("capped")) {
                capped(c);
            } else {
                tour(c);
            }
        }
    }

    static Connection connect(String url, String user, String password) throws SQLException {
        Properties p = new Properties();
        p.setProperty("user", user);
        p.setProperty("password", password);
        return DriverManager.getConnection(url, p);
    }

    static void tour(Connection c) throws SQLException {
        DatabaseMetaData meta = c.getMetaData();
        System.out.println("version\t" + meta.getDatabaseProductVersion());
        try (ResultSet tables = meta.getTables(null, null, "%", new String[] {"TABLE"})) {
            while (tables.next()) {
                System.out.println("table\t" + tables.getString("TABLE_NAME"));
            }
        }
        try (ResultSet columns = meta.getColumns(null, null, "people", null)) {
            while (columns.next()) {
                System.out.println("column\t" + columns.getString("COLUMN_NAME") + "\t" + columns.getString("TYPE_NAME"));
            }
        }
        // what a database browser asks when it opens a table: no keys, no indexes, the schemas
        count("schemas", meta.getSchemas());
        count("primary keys", meta.getPrimaryKeys(null, null, "people"));
        count("imported keys", meta.getImportedKeys(null, null, "people"));
        count("indexes", meta.getIndexInfo(null, null, "people", false, true));
        count("functions", meta.getFunctions(null, null, "%"));
        try (Statement s = c.createStatement()) {
            s.execute("SET dpsql.epsilon = 0.25");
            show(c, "tour", s.executeQuery(TOUR));
            try (ResultSet plan = s.executeQuery("EXPLAIN SELECT SUM(income) FROM people")) {
                while (plan.next()) {
                    System.out.println("explain\t" + plan.getString(1));
                }
            }
            try {
                s.executeQuery("SELECT age FROM people");
            } catch (SQLException e) {
                error("refused", e);
            }
        }
        // past the driver's prepareThreshold (5) it asks for binary results of a named statement;
        // described before it runs, its columns are not known yet (nothing is run or charged)
        try (PreparedStatement ps = c.prepareStatement("SELECT sick, COUNT(*) FROM people WHERE age >= ? GROUP BY sick")) {
            ResultSetMetaData before = ps.getMetaData();
            System.out.println("described\t" + (before == null ? "unknown" : before.getColumnCount()));
            for (int i = 0; i < 6; i++) {
                ps.setInt(1, 18);
                show(c, "prepared " + i, ps.executeQuery());
            }
        }
        // an untyped parameter: at the threshold the driver describes the statement before binding it
        try (PreparedStatement ps = c.prepareStatement("SELECT COUNT(*) AS n FROM people WHERE state = ?")) {
            for (int i = 0; i < 6; i++) {
                ps.setObject(1, "CA", Types.OTHER);
                show(c, "untyped " + i, ps.executeQuery());
            }
        }
        // outside autocommit the driver sends BEGIN, and fetches 2 rows at a time from a portal
        c.setAutoCommit(false);
        try (Statement s = c.createStatement()) {
            s.setFetchSize(2);
            show(c, "fetched", s.executeQuery("SELECT state, COUNT(*) AS n FROM people GROUP BY state"));
        }
        c.commit();
    }

    static void capped(Connection c) throws SQLException {
        try (Statement s = c.createStatement()) {
            s.execute("SET dpsql.epsilon = 5");
            try {
                s.executeQuery(TOUR);
            } catch (SQLException e) {
                error("over cap", e);
            }
            s.execute("SET dpsql.epsilon = 0.25");
            show(c, "after", s.executeQuery(TOUR));
        }
    }

    static void count(String label, ResultSet r) throws SQLException {
        int rows = 0;
        while (r.next()) {
            rows++;
        }
        r.close();
        System.out.println("metadata\t" + label + "\t" + rows);
    }

    static void show(Connection c, String label, ResultSet r) throws SQLException {
        ResultSetMetaData m = r.getMetaData();
        StringBuilder head = new StringBuilder("result\t" + label);
        for (int i = 1; i <= m.getColumnCount(); i++) {
            head.append("\t").append(m.getColumnLabel(i)).append(":").append(m.getColumnTypeName(i));
        }
        System.out.println(head);
        while (r.next()) {
            StringBuilder row = new StringBuilder("row");
            for (int i = 1; i <= m.getColumnCount(); i++) {
                row.append("\t");
                if (r.getObject(i) == null) {
                    row.append("NULL");
                } else if (m.getColumnType(i) == Types.BIGINT) {
                    row.append(r.getLong(i));
                } else if (m.getColumnType(i) == Types.DOUBLE) {
                    row.append("d").append(Long.toHexString(Double.doubleToRawLongBits(r.getDouble(i))));
                } else if (m.getColumnType(i) == Types.BIT || m.getColumnType(i) == Types.BOOLEAN) {
                    row.append(r.getBoolean(i));
                } else {
                    row.append(r.getString(i));
                }
            }
            System.out.println(row);
        }
        r.close();
        try (Statement s = c.createStatement(); ResultSet id = s.executeQuery("SHOW dpsql.answer_id")) {
            id.next();
            System.out.println("answer\t" + id.getString(1));
        }
    }

    static void error(String label, SQLException e) {
        String message = e instanceof PSQLException && ((PSQLException) e).getServerErrorMessage() != null
            ? ((PSQLException) e).getServerErrorMessage().getMessage() : e.getMessage();
        System.out.println("error\t" + label + "\t" + e.getSQLState() + "\t" + message);
    }
}
