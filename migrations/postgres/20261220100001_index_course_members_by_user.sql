-- migrate:up
-- "My courses": a user's memberships in course order, read from the index alone. The primary key
-- (course_id, user_id) answers "is this user in this course" and cannot list a user's courses
-- without reading every course's members.
CREATE INDEX course_members_by_user ON course_members (user_id, course_id) INCLUDE (role, joined_at);

-- migrate:down
DROP INDEX course_members_by_user;
