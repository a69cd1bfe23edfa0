package files

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/url"
	"strconv"
	"time"

	"github.com/imserver/imserver/chat"
)

// Signer makes and checks the signed links of file objects: an expiry and
// an HMAC-SHA256, under a server secret, of the file id, whether the link
// is to the thumbnail, and the expiry. A link is no capability beyond
// that one file (or thumbnail) until it expires.
type Signer struct {
	key       []byte
	prefix    string        // the API path files live under
	maxPixels int64         // images larger get no thumbnail link
	ttl       time.Duration // a link is valid at least this long
	now       func() time.Time
}

// LinkTTL is how long a link is valid at least, from when it is handed out.
const LinkTTL = time.Hour

// NewSigner signs with key links under prefix (e.g. "/api/v1/files/");
// images of more than maxPixels get no thumbnail link.
func NewSigner(key []byte, prefix string, maxPixels int64) *Signer {
	return &Signer{key: key, prefix: prefix, maxPixels: maxPixels, ttl: LinkTTL, now: time.Now}
}

var _ chat.FileLinker = (*Signer)(nil)

// Link implements chat.FileLinker. Expiries are rounded up to the next
// ttl boundary plus one ttl, so a link handed out now is valid between one
// and two ttls, and the same file gets the same link for a while: browsers
// cache what they loaded.
func (s *Signer) Link(f *chat.File) {
	exp := s.expiry()
	f.URL = s.url(f.ID, false, exp)
	if Previewable(f.Mime) && f.Width > 0 && f.Height > 0 && int64(f.Width)*int64(f.Height) <= s.maxPixels {
		f.ThumbURL = s.url(f.ID, true, exp)
	} else {
		f.ThumbURL = ""
	}
}

func (s *Signer) expiry() int64 {
	step := int64(s.ttl / time.Second)
	return (s.now().Unix()/step + 2) * step
}

func (s *Signer) url(id string, thumb bool, exp int64) string {
	p := s.prefix + url.PathEscape(id)
	if thumb {
		p += "/thumb"
	}
	return p + "?exp=" + strconv.FormatInt(exp, 10) + "&sig=" + s.sign(id, thumb, exp)
}

func (s *Signer) sign(id string, thumb bool, exp int64) string {
	m := hmac.New(sha256.New, s.key)
	kind := "file\x00"
	if thumb {
		kind = "thumb\x00"
	}
	m.Write([]byte(kind))
	m.Write([]byte(id))
	m.Write([]byte{0})
	m.Write(strconv.AppendInt(nil, exp, 10))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Verify checks a link's exp and sig query values for file id.
func (s *Signer) Verify(id string, thumb bool, exp, sig string) bool {
	e, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || e < s.now().Unix() {
		return false
	}
	return hmac.Equal([]byte(sig), []byte(s.sign(id, thumb, e)))
}
