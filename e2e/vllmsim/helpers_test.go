package vllmsim

func mustProfile(name string) Profile {
	p, err := ProfileByName(name)
	if err != nil {
		panic(err)
	}
	return p
}
