//! The "migration in progress" mark of a schema that `fusee migrate` is
//! filling, so that an interrupted migration leaves a schema every open
//! refuses instead of a store with half the runs.
//!
//! A schema is a store when its `format` table holds its row (see
//! the `schema` module). While a migration writes into a schema, that row
//! sits in a table `migrating` instead and `format` is empty, which the
//! schema's judge refuses with `NotAStore` (naming the interrupted
//! migration). Moving the row either way is one transaction, so after any
//! crash the schema is either marked (refused) or whole.
//!
//! | state | `format` | `migrating` |
//! |---|---|---|
//! | a store | one row | absent |
//! | being migrated into | empty | the store's row |

use fusee_storage::{Result, StorageError};

use crate::error::{PgError, map};
use crate::{PgOptions, PgStorage};

/// What a schema holds, as far as a migration into it cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaState {
    /// No schema, or one without tables: a new store can be made there.
    Empty,
    /// A store (its `format` row is there).
    Store,
    /// A store an interrupted migration left marked ([`PgStorage::mark_incomplete`]).
    Incomplete,
    /// Tables that are not a Fusee store.
    Foreign,
}

fn client(options: &PgOptions) -> Result<postgres::Client> {
    crate::schema::check_name(&options.schema)?;
    let config: postgres::Config = options.url.parse().map_err(|e: postgres::Error| {
        StorageError::from(PgError::BadUrl {
            message: e.to_string(),
        })
    })?;
    config
        .connect(postgres::NoTls)
        .map_err(|e| map(&e, "connecting", &options.schema))
}

fn exists(c: &mut postgres::Client, schema: &str, table: &str) -> Result<bool> {
    c.query_one(
        "SELECT to_regclass(quote_ident($1) || '.' || $2) IS NOT NULL",
        &[&schema, &table],
    )
    .and_then(|r| r.try_get(0))
    .map_err(|e| map(&e, "looking at the schema", schema))
}

/// Looks at the schema `options` names without opening it as a store.
pub fn schema_state(options: &PgOptions) -> Result<SchemaState> {
    let mut c = client(options)?;
    let schema = options.schema.as_str();
    let err = |e: postgres::Error| map(&e, "looking at the schema", schema);
    if exists(&mut c, schema, "format")? {
        let rows: i64 = c
            .query_one(&format!("SELECT count(*) FROM \"{schema}\".format"), &[])
            .and_then(|r| r.try_get(0))
            .map_err(err)?;
        return Ok(match (rows, exists(&mut c, schema, "migrating")?) {
            (0, true) => SchemaState::Incomplete,
            (0, false) => SchemaState::Foreign,
            _ => SchemaState::Store,
        });
    }
    let tables: i64 = c
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = $1",
            &[&schema],
        )
        .and_then(|r| r.try_get(0))
        .map_err(err)?;
    Ok(if tables == 0 {
        SchemaState::Empty
    } else {
        SchemaState::Foreign
    })
}

/// Drops the schema `options` names if (and only if) an interrupted
/// migration left it marked; returns whether it did.
pub fn drop_incomplete(options: &PgOptions) -> Result<bool> {
    if schema_state(options)? != SchemaState::Incomplete {
        return Ok(false);
    }
    let mut c = client(options)?;
    let schema = options.schema.as_str();
    c.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .map_err(|e| map(&e, "dropping an incomplete migration's schema", schema))?;
    Ok(true)
}

impl PgStorage {
    /// Marks this store as being migrated into: its `format` row moves to
    /// the `migrating` table, so no open accepts the schema until
    /// [`PgStorage::mark_complete`]. One transaction.
    pub fn mark_incomplete(&self) -> Result<()> {
        let schema = self.shared.options.schema.clone();
        self.move_format(
            &format!(
                "CREATE TABLE \"{schema}\".migrating AS SELECT * FROM \"{schema}\".format;
                 DELETE FROM \"{schema}\".format;"
            ),
            "marking the schema incomplete",
        )
    }

    /// Puts the `format` row back where [`PgStorage::mark_incomplete`]
    /// moved it from: the schema is a store again. One transaction.
    pub fn mark_complete(&self) -> Result<()> {
        let schema = self.shared.options.schema.clone();
        self.move_format(
            &format!(
                "INSERT INTO \"{schema}\".format SELECT * FROM \"{schema}\".migrating;
                 DROP TABLE \"{schema}\".migrating;"
            ),
            "marking the schema complete",
        )
    }

    fn move_format(&self, sql: &str, doing: &'static str) -> Result<()> {
        let mut conn = self.shared.connect()?;
        let place = self.shared.place.clone();
        let mut tx = conn
            .client
            .transaction()
            .map_err(|e| map(&e, doing, &place))?;
        tx.batch_execute(sql).map_err(|e| map(&e, doing, &place))?;
        tx.commit().map_err(|e| map(&e, doing, &place))
    }
}
