// An Iceberg REST catalog server for the tests, run by testkit/iceberg_rest.py as a single-file source program
// (`java -cp <jars> IcebergRestServer.java HOST PORT JDBC_URI WAREHOUSE`). It is Iceberg's own REST server half
// (RESTCatalogAdapter and RESTCatalogServlet, from iceberg-core's test jar, what Iceberg's REST fixture image runs)
// over Iceberg's JDBC catalog on a SQLite file, listening on HOST only: Iceberg's RESTCatalogServer listens on
// every interface, and the tests serve on 127.0.0.1.
import java.util.HashMap;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.rest.RESTCatalogAdapter;
import org.apache.iceberg.rest.RESTCatalogServlet;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.servlet.ServletContextHandler;
import org.eclipse.jetty.servlet.ServletHolder;

public class IcebergRestServer {
  public static void main(String[] args) throws Exception {
    String host = args[0];
    int port = Integer.parseInt(args[1]);
    Map<String, String> properties = new HashMap<>();
    properties.put(CatalogProperties.URI, args[2]);
    properties.put(CatalogProperties.WAREHOUSE_LOCATION, args[3]);
    properties.put("jdbc.schema-version", "V1"); // views too, as Iceberg's REST fixture does
    Catalog backend =
        CatalogUtil.loadCatalog(
            "org.apache.iceberg.jdbc.JdbcCatalog", "rest_backend", properties, new Configuration());
    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    context.addServlet(new ServletHolder(new RESTCatalogServlet(new RESTCatalogAdapter(backend))), "/*");
    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost(host);
    connector.setPort(port);
    server.addConnector(connector);
    server.setHandler(context);
    server.start();
    System.out.println("iceberg rest catalog listening on " + host + ":" + port);
    server.join();
  }
}
