-- migrate:up
-- One forum per course: no forums table. Courses and enrolment come from the
-- course catalogue; the forum only needs to know who may take part.
CREATE TABLE courses (
  id         bigint PRIMARY KEY,
  title      text   NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE course_members (
  course_id  bigint NOT NULL REFERENCES courses (id),
  user_id    bigint NOT NULL,
  role       text   NOT NULL DEFAULT 'student' CHECK (role IN ('student', 'teacher')),
  joined_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (course_id, user_id)
);

-- migrate:down
DROP TABLE course_members;
DROP TABLE courses;
