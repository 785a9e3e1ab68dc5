package auth

// UserNamed returns the user the users file in force names so, or for "" the user
// anonymous clients are (nil when anonymous access is off); nil when there is no
// such user. It is for state that outlives its connection and keeps its owner's
// name, not its credentials: an MQTT persistent session restored after a restart
// goes on with the rights of the user that made it.
func (a *Authenticator) UserNamed(name string) *User {
	t := a.table.Load()
	if name == "" {
		switch {
		case a.anon == AnonymousNone:
			return nil
		case t.anonymous != nil:
			return t.anonymous
		}
		return unrestricted
	}
	if e := t.byName[name]; e != nil {
		return e.user
	}
	return nil
}
