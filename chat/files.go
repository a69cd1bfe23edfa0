package chat

import "context"

// MaxAttachments is how many files one text message may attach.
const MaxAttachments = 10

// File is an uploaded file as clients see it: in the upload's answer and
// in the attachments of a message. URL and ThumbURL are signed, expiring
// links that work without the Authorization header (for <img> tags);
// ThumbURL is set only for images that can be previewed.
type File struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Size     int64  `json:"size"`
	Mime     string `json:"mime"`
	Width    int    `json:"width,omitempty"`
	Height   int    `json:"height,omitempty"`
	URL      string `json:"url,omitempty"`
	ThumbURL string `json:"thumb_url,omitempty"`
}

// FileRecord is a file's row: what clients see plus what only the server
// needs.
type FileRecord struct {
	File
	Uploader  string
	SHA256    string // hex; names the bytes on disk
	CreatedAt int64
	// AttachedAt is when a message first attached the file; 0 while none has.
	AttachedAt int64
}

// FileLinker fills in the signed URLs of a file object. The store calls it
// on every file object it hands out, so that links are fresh when a
// message is delivered or pulled.
type FileLinker interface {
	Link(f *File)
}

// FileStore holds the files' metadata and who may see them.
type FileStore interface {
	CreateFile(ctx context.Context, f FileRecord) error
	// FileByID returns the file whatever the caller; ENotFound if none.
	FileByID(ctx context.Context, id string) (FileRecord, error)
	// FileFor returns the file when user uploaded it or can see a message
	// that attaches it (within its visible range); ENotFound otherwise, so
	// that existence is not revealed.
	FileFor(ctx context.Context, id, user string) (FileRecord, error)
	// FileRefs counts the rows that use the bytes with this hash.
	FileRefs(ctx context.Context, sha256 string) (int, error)
	// DeleteUnattached removes the rows of files no message attached that
	// were uploaded before createdBefore, and returns their hashes.
	DeleteUnattached(ctx context.Context, createdBefore int64) ([]string, error)
}
