//! Record kind tags: the first byte of every canonical record body.
//!
//! Tags are part of the stored format: a tag, once assigned, never changes
//! meaning. Tag 0 is never a record (a zeroed byte is garbage, not a kind);
//! the tags follow [`Record`](super::Record)'s variant order from 1 to 24.

/// [`Record::Start`](super::Record::Start).
pub const START: u8 = 1;
/// [`Record::Step`](super::Record::Step).
pub const STEP: u8 = 2;
/// [`Record::Attempt`](super::Record::Attempt).
pub const ATTEMPT: u8 = 3;
/// [`Record::Resume`](super::Record::Resume).
pub const RESUME: u8 = 4;
/// [`Record::Timer`](super::Record::Timer).
pub const TIMER: u8 = 5;
/// [`Record::Fired`](super::Record::Fired).
pub const FIRED: u8 = 6;
/// [`Record::Signal`](super::Record::Signal).
pub const SIGNAL: u8 = 7;
/// [`Record::Wait`](super::Record::Wait).
pub const WAIT: u8 = 8;
/// [`Record::Waited`](super::Record::Waited).
pub const WAITED: u8 = 9;
/// [`Record::Value`](super::Record::Value).
pub const VALUE: u8 = 10;
/// [`Record::Child`](super::Record::Child).
pub const CHILD: u8 = 11;
/// [`Record::ChildDone`](super::Record::ChildDone).
pub const CHILD_DONE: u8 = 12;
/// [`Record::Send`](super::Record::Send).
pub const SEND: u8 = 13;
/// [`Record::Cancel`](super::Record::Cancel).
pub const CANCEL: u8 = 14;
/// [`Record::Update`](super::Record::Update).
pub const UPDATE: u8 = 15;
/// [`Record::UpdateDone`](super::Record::UpdateDone).
pub const UPDATE_DONE: u8 = 16;
/// [`Record::Heartbeat`](super::Record::Heartbeat).
pub const HEARTBEAT: u8 = 17;
/// [`Record::Patch`](super::Record::Patch).
pub const PATCH: u8 = 18;
/// [`Record::Awaiting`](super::Record::Awaiting).
pub const AWAITING: u8 = 19;
/// [`Record::Completed`](super::Record::Completed).
pub const COMPLETED: u8 = 20;
/// [`Record::Attributes`](super::Record::Attributes).
pub const ATTRIBUTES: u8 = 21;
/// [`Record::Chunk`](super::Record::Chunk).
pub const CHUNK: u8 = 22;
/// [`Record::StreamEnd`](super::Record::StreamEnd).
pub const STREAM_END: u8 = 23;
/// [`Record::Done`](super::Record::Done).
pub const DONE: u8 = 24;

/// Every valid tag, in order (`ALL[i] == i + 1`).
pub const ALL: [u8; 24] = [
    START,
    STEP,
    ATTEMPT,
    RESUME,
    TIMER,
    FIRED,
    SIGNAL,
    WAIT,
    WAITED,
    VALUE,
    CHILD,
    CHILD_DONE,
    SEND,
    CANCEL,
    UPDATE,
    UPDATE_DONE,
    HEARTBEAT,
    PATCH,
    AWAITING,
    COMPLETED,
    ATTRIBUTES,
    CHUNK,
    STREAM_END,
    DONE,
];

/// The variant name of tag `tag` (for messages), or `None` for a byte that
/// is not a kind.
pub const fn name(tag: u8) -> Option<&'static str> {
    Some(match tag {
        START => "Start",
        STEP => "Step",
        ATTEMPT => "Attempt",
        RESUME => "Resume",
        TIMER => "Timer",
        FIRED => "Fired",
        SIGNAL => "Signal",
        WAIT => "Wait",
        WAITED => "Waited",
        VALUE => "Value",
        CHILD => "Child",
        CHILD_DONE => "ChildDone",
        SEND => "Send",
        CANCEL => "Cancel",
        UPDATE => "Update",
        UPDATE_DONE => "UpdateDone",
        HEARTBEAT => "Heartbeat",
        PATCH => "Patch",
        AWAITING => "Awaiting",
        COMPLETED => "Completed",
        ATTRIBUTES => "Attributes",
        CHUNK => "Chunk",
        STREAM_END => "StreamEnd",
        DONE => "Done",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_dense_from_one_and_named() {
        for (i, &tag) in ALL.iter().enumerate() {
            assert_eq!(usize::from(tag), i + 1);
            assert!(name(tag).is_some(), "tag {tag} has no name");
        }
        assert_eq!(name(0), None);
        assert_eq!(name(25), None);
        assert_eq!(name(u8::MAX), None);
    }
}
