package job

import "time"

// CursorAt is the cursor that follows a job created at at with id id.
func CursorAt(at time.Time, id string) Cursor { return cursorOf(Row{CreatedAt: at, ID: id}) }
