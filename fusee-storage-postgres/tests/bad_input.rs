//! Bad input gives named errors: a URL that does not parse, no server at
//! the address, a missing database, a role without rights, a schema of
//! another version, of another backend or with other tables, a bad schema
//! name, and an existing-only open of a missing store.
//!
//! Without `FUSEE_PG_URL` (outside CI) the file compiles to one test that
//! prints SKIPPED.

mod common;

#[cfg(not(fusee_pg))]
#[test]
fn bad_input_skipped() {
    common::skipped_without_server("bad_input: 8 tests skipped");
}

#[cfg(fusee_pg)]
mod with_server {
    use fusee_storage::StorageError;
    use fusee_storage::identity::Create;
    use fusee_storage_postgres::{PgError, PgOptions, PgStorage, SCHEMA_VERSION};

    use super::common::{admin, drop_schema, options, unique_schema, url};

    fn open_err(o: &PgOptions) -> StorageError {
        match PgStorage::open(o) {
            Ok(_) => panic!("opening {o:?} must fail"),
            Err(e) => e,
        }
    }

    fn backend(e: &StorageError) -> &PgError {
        match e {
            StorageError::Backend(b) => b
                .downcast_ref::<PgError>()
                .unwrap_or_else(|| panic!("expected a PgError; found {e:?}")),
            other => panic!("expected Backend(PgError); found {other:?}"),
        }
    }

    /// The server's URL with another user, port or database.
    fn with(user: &str, port: Option<u16>, db: &str) -> String {
        let c: postgres::Config = url().parse().unwrap_or_else(|e| panic!("{e}"));
        let host = match c.get_hosts().first() {
            Some(postgres::config::Host::Tcp(h)) => h.clone(),
            _ => "127.0.0.1".to_owned(),
        };
        let port = port.unwrap_or_else(|| c.get_ports().first().copied().unwrap_or(5432));
        format!("postgresql://{user}@{host}:{port}/{db}")
    }

    #[test]
    fn a_url_that_does_not_parse() {
        let e = open_err(&PgOptions::new("postgresql://host:notaport/db"));
        assert!(matches!(backend(&e), PgError::BadUrl { .. }), "{e}");
    }

    #[test]
    fn no_server_at_the_address() {
        // Port 1 on loopback: nothing listens there.
        let e = open_err(&PgOptions::new(with("postgres", Some(1), "postgres")));
        match &e {
            StorageError::Io { context, error } => {
                assert!(context.contains("connecting"), "{e}");
                assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
            }
            other => panic!("expected Io; found {other:?}"),
        }
    }

    #[test]
    fn a_missing_database() {
        let e = open_err(&PgOptions::new(with("postgres", None, "fusee_no_such_db")));
        assert!(matches!(e, StorageError::NotFound { .. }), "{e:?}");
    }

    #[test]
    fn a_role_without_rights() {
        let role = unique_schema("role");
        let mut a = admin(&url());
        a.batch_execute(&format!("CREATE ROLE {role} LOGIN"))
            .unwrap_or_else(|e| panic!("{e}"));
        let schema = unique_schema("noperm");
        let e = open_err(&options(&with(&role, None, "postgres"), &schema, "o"));
        let _ = a.batch_execute(&format!("DROP ROLE {role}"));
        match backend(&e) {
            PgError::PermissionDenied { message, .. } => {
                assert!(message.contains("permission denied"), "{e}");
            }
            other => panic!("expected PermissionDenied; found {other:?}"),
        }
        assert!(!e.to_string().contains("password"), "{e}");
    }

    #[test]
    fn a_schema_of_another_version() {
        let schema = unique_schema("ver");
        let o = options(&url(), &schema, "o");
        drop(PgStorage::open(&o).unwrap_or_else(|e| panic!("{e}")));
        let mut a = admin(&url());
        a.batch_execute(&format!("UPDATE \"{schema}\".format SET version = 99"))
            .unwrap_or_else(|e| panic!("{e}"));
        let e = open_err(&o);
        drop_schema(&url(), &schema);
        match e {
            StorageError::UnsupportedFormat {
                found, supported, ..
            } => assert_eq!((found, supported), (99, SCHEMA_VERSION)),
            other => panic!("expected UnsupportedFormat; found {other:?}"),
        }
    }

    #[test]
    fn a_schema_of_another_backend_or_program() {
        let schema = unique_schema("other");
        let mut a = admin(&url());
        a.batch_execute(&format!(
            "CREATE SCHEMA \"{schema}\"; CREATE TABLE \"{schema}\".orders (id int)"
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        let o = options(&url(), &schema, "o");
        let e = open_err(&o);
        assert!(matches!(e, StorageError::NotAStore { .. }), "{e:?}");
        a.batch_execute(&format!(
            "CREATE TABLE \"{schema}\".format (one boolean PRIMARY KEY DEFAULT true,
             backend text NOT NULL, version int4 NOT NULL);
             INSERT INTO \"{schema}\".format (backend, version) VALUES ('sqlite', 1)"
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        let e = open_err(&o);
        drop_schema(&url(), &schema);
        assert!(
            matches!(&e, StorageError::WrongBackend { found, .. } if found == "sqlite"),
            "{e:?}"
        );
    }

    #[test]
    fn a_bad_schema_name_or_lease() {
        let e = open_err(&PgOptions::new(url()).schema("Robert'); DROP TABLE x;--"));
        assert!(
            matches!(
                backend(&e),
                PgError::BadOption {
                    option: "schema",
                    ..
                }
            ),
            "{e}"
        );
        let e = open_err(&PgOptions::new(url()).lease(std::time::Duration::from_millis(1)));
        assert!(
            matches!(
                backend(&e),
                PgError::BadOption {
                    option: "lease",
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn existing_only_open_of_a_missing_store() {
        let mut o = options(&url(), &unique_schema("never"), "o");
        o.create = Create::Never;
        let e = open_err(&o);
        assert!(matches!(e, StorageError::NotFound { .. }), "{e:?}");
    }
}
