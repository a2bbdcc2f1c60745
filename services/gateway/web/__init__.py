"""The web page the gateway serves at `/`: static HTML, JS and CSS over the HTTP face's API."""
